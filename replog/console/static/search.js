// replog console: a record search's progress. Polls its job (JSON) while it runs, shows
// records and bytes examined and matches so far, shows the results once it ends, and
// cancels it with the Cancel button (a POST with the page's CSRF token). No framework.
(function () {
  "use strict";

  function set(id, text) {
    var el = document.getElementById(id);
    if (el) { el.textContent = text; }
  }

  function watch(section) {
    var url = section.getAttribute("data-url");
    var ms = parseInt(section.getAttribute("data-refresh-ms"), 10) || 500;
    var busy = false;
    var timer = null;
    function show(job) {
      set("search-state", job.state);
      set("search-records", String(job.records));
      set("search-bytes", job.bytes_text);
      set("search-matches", String(job.matches));
      set("search-offset", String(job.next_offset));
      section.setAttribute("data-state", job.state);
      if (job.state === "running") { return; }
      window.clearInterval(timer);
      var form = document.getElementById("search-cancel-form");
      if (form) { form.parentNode.removeChild(form); }
      var soFar = document.getElementById("search-so-far");
      if (soFar) { soFar.parentNode.removeChild(soFar); }
      var result = document.getElementById("search-result");
      if (job.html) {
        result.innerHTML = job.html;
      } else if (job.error) {
        result.innerHTML = "";
        var p = document.createElement("p");
        p.className = "problem";
        p.id = "error-message";
        p.textContent = job.error;
        result.appendChild(p);
      }
    }
    function poll() {
      if (busy) { return; }
      busy = true;
      fetch(url, { cache: "no-store" })
        .then(function (resp) { return resp.ok ? resp.json() : null; })
        .then(function (job) { if (job) { show(job); } })
        .catch(function () { set("live-status", "the console does not answer"); })
        .then(function () { busy = false; });
    }
    timer = window.setInterval(poll, ms);
    var form = document.getElementById("search-cancel-form");
    if (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        var button = document.getElementById("search-cancel");
        button.disabled = true;
        button.textContent = "Cancelling…";
        fetch(form.getAttribute("action"), {
          method: "POST",
          body: new URLSearchParams(new FormData(form)),
          headers: { "X-Console-Partial": "1" },
          cache: "no-store"
        }).then(poll).catch(function () { set("live-status", "the cancel was not sent"); });
      });
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var section = document.getElementById("search-job");
    if (section && section.getAttribute("data-state") === "running") { watch(section); }
  });
})();
