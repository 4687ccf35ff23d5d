// Applies the stored theme before the first paint (loaded without defer, in <head>).
// No stored choice: the stylesheet follows the system setting (prefers-color-scheme).
(function () {
  "use strict";
  try {
    var theme = window.localStorage.getItem("ragdesk.theme");
    if (theme === "light" || theme === "dark") { document.documentElement.dataset.theme = theme; }
  } catch (error) { /* storage disabled: follow the system */ }
})();
