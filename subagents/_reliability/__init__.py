"""The reliability harness behind ``subagents verify --report`` (private).

Crash runs and SIGSTOP runs against real host processes, the load run and the
hostile-input corpus live here because they drive the host, which sits above ``properties``
in the layering; the store-level pieces (fault points, clock skew) live in
``storage`` and ``properties``. Nothing here is imported by the runtime.
"""
