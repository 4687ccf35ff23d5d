// Applies the stored theme and layout before the first paint (loaded without defer, in <head>).
// No stored choice: the stylesheet follows the system setting (prefers-color-scheme).
// Pane widths and hidden panes are CSS variables / data attributes on <html>, set through
// the CSSOM: the Content-Security-Policy allows no style attributes in the markup.
(function () {
  "use strict";
  var root = document.documentElement;
  try {
    var theme = window.localStorage.getItem("ragdesk.theme");
    if (theme === "light" || theme === "dark") { root.dataset.theme = theme; }
    ["sidebar", "inspector"].forEach(function (pane) {
      var width = parseInt(window.localStorage.getItem("ragdesk." + pane + "Width"), 10);
      if (width >= 120 && width <= 1200) { root.style.setProperty("--" + pane + "-width", width + "px"); }
      if (window.localStorage.getItem("ragdesk." + pane + "Hidden") === "1") { root.dataset[pane] = "hidden"; }
    });
  } catch (error) { /* storage disabled: defaults */ }
})();
