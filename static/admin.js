// Admin pages (synced sources, groups): what HTML attributes cannot express. No inline
// script anywhere (CSP).
(function () {
  "use strict";

  // The new-source form shows the fields of the kind chosen; the other kind's fieldset is
  // disabled too, so its fields are not sent.
  function showKind(form) {
    var kind = form.querySelector("[name=kind]").value;
    Array.prototype.forEach.call(form.querySelectorAll("fieldset[data-kind]"), function (set) {
      var chosen = set.dataset.kind === kind;
      set.hidden = !chosen;
      set.disabled = !chosen;
    });
  }
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("#source-form");
    if (form && event.target.name === "kind") { showKind(form); }
  });
})();
