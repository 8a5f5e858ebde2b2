// The login link `make demo` prints, /ui/login#token=TOKEN: the token, which travels in the fragment (never
// sent to the server, so in no request log), fills the token form and is dropped from the address bar and the
// history at once. The person still presses Log in: a link alone logs nobody in.
(function () {
  "use strict";
  var found = /^#token=([^&]+)$/.exec(window.location.hash);
  if (!found) { return; }
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
  document.addEventListener("DOMContentLoaded", function () {
    var field = document.getElementById("token");
    if (!field) { return; }
    field.value = decodeURIComponent(found[1]);
    var button = field.form && field.form.querySelector("button[type=submit]");
    if (button) { button.focus(); }
  });
})();
