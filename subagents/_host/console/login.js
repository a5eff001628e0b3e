// The one-time login: the code is in the link's fragment (never sent to a server,
// so never in a request line or a log). Post it in a body, drop it from the
// address bar, and go to the console once the HttpOnly cookie is set.
"use strict";
(function () {
  const status = document.getElementById("login-status");
  const code = window.location.hash.slice(1);
  window.history.replaceState(null, "", "/login");
  if (!code) {
    status.textContent = "No login code: open the console link that `subagents serve --http` printed.";
    return;
  }
  fetch("/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ code: code }),
    credentials: "same-origin",
  }).then(function (response) {
    if (response.status === 204) {
      window.location.replace("/");
      return null;
    }
    return response.json().then(function (body) {
      status.textContent = "Login failed: " + (body.error || response.status) +
        ". Ask the host for a new link (POST /console/login-link with the token).";
    });
  }).catch(function (error) {
    status.textContent = "Login failed: " + error;
  });
})();
