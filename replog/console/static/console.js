// replog console: live parts of pages re-fetch their HTML, and the record browser's
// "follow live" appends records sent over Server-Sent Events. No framework.
(function () {
  "use strict";
  var ROWS_KEPT_MAX = 1000;

  function say(text) {
    var el = document.getElementById("live-status");
    if (el) { el.textContent = text; }
  }

  // <section data-live data-refresh-ms="2000">: replaced by the page's live block.
  function refresh(section) {
    var ms = parseInt(section.getAttribute("data-refresh-ms"), 10) || 2000;
    var busy = false;
    window.setInterval(function () {
      if (busy || document.hidden) { return; }
      busy = true;
      fetch(window.location.href, { headers: { "X-Console-Partial": "1" }, cache: "no-store" })
        .then(function (resp) {
          var problem = resp.headers.get("X-Console-Problem");
          if (problem) { say("not refreshed: " + problem); return null; }
          return resp.ok ? resp.text() : null;
        })
        .then(function (html) {
          if (html !== null) {
            section.innerHTML = html;
            say("updated " + new Date().toLocaleTimeString());
          }
        })
        .catch(function () { say("the console does not answer"); })
        .then(function () { busy = false; });
    }, ms);
  }

  // <button id="follow" data-url="...live?...">: starts or stops following new records.
  function follow(button) {
    var source = null;
    var rows = document.getElementById("record-rows");
    var status = document.getElementById("follow-status");
    var added = 0;
    function stop(text) {
      if (source) { source.close(); source = null; }
      button.textContent = "Follow live";
      button.classList.remove("on");
      if (text) { status.textContent = text; }
    }
    button.addEventListener("click", function () {
      if (source) { stop("stopped"); return; }
      source = new EventSource(button.getAttribute("data-url"));
      button.textContent = "Stop following";
      button.classList.add("on");
      status.textContent = "following: new records appear below";
      source.addEventListener("records", function (event) {
        var data = JSON.parse(event.data);
        var holder = document.createElement("tbody");
        holder.innerHTML = data.html;
        while (holder.firstElementChild) {
          var row = holder.firstElementChild;
          row.classList.add("fresh");
          rows.appendChild(row);
          added += 1;
        }
        while (rows.children.length > ROWS_KEPT_MAX) { rows.removeChild(rows.firstElementChild); }
        status.textContent = "following: " + added + " new record(s), next offset " + data.next;
      });
      source.addEventListener("problem", function (event) { stop(JSON.parse(event.data).message); });
      source.addEventListener("end", function (event) { stop(JSON.parse(event.data).message); });
      source.addEventListener("error", function () {
        if (source && source.readyState === EventSource.CONNECTING) {
          status.textContent = "reconnecting…";
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var sections = document.querySelectorAll("[data-live]");
    for (var i = 0; i < sections.length; i += 1) { refresh(sections[i]); }
    var button = document.getElementById("follow");
    if (button) { follow(button); }
  });
})();
