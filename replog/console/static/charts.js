// replog console: the Charts page. Polls /charts/data (the console's own samples) and draws
// each chart with uPlot (vendored: static/uplot.min.js). Each <figure data-chart> also keeps
// data-series (labels drawn) and data-last (each label's latest value, JSON) for tests and
// for reading without hovering.
(function () {
  "use strict";
  var COLORS = ["#1f4e79", "#d97706", "#17663a", "#b42318", "#7c3aed", "#0891b2",
                "#be185d", "#4d7c0f", "#57534e", "#2563eb"];
  var plots = {};  // chart name -> {plot, labels}

  function say(text) {
    var el = document.getElementById("live-status");
    if (el) { el.textContent = text; }
  }

  function number(v) {
    if (v === null || v === undefined) { return "–"; }
    var a = Math.abs(v);
    if (a >= 1e9) { return (v / 1e9).toFixed(1) + "G"; }
    if (a >= 1e6) { return (v / 1e6).toFixed(1) + "M"; }
    if (a >= 1e5) { return Math.round(v / 1e3) + "k"; }
    if (a >= 1e3) { return (v / 1e3).toFixed(1) + "k"; }
    return a >= 10 || v === Math.round(v) ? String(Math.round(v)) : v.toFixed(1);
  }

  function make(figure, labels, data) {
    var width = Math.max(300, figure.clientWidth - 16);
    var series = [{}];
    for (var i = 0; i < labels.length; i += 1) {
      series.push({ label: labels[i], stroke: COLORS[i % COLORS.length], width: 1.5,
                    spanGaps: false, value: function (u, v) { return number(v); } });
    }
    var opts = {
      width: width, height: 200, series: series,
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
      axes: [{}, { values: function (u, vals) { return vals.map(number); }, size: 58 }],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } }
    };
    return new uPlot(opts, data, figure);
  }

  function draw(figure, times, byLabel) {
    var name = figure.getAttribute("data-chart");
    var labels = Object.keys(byLabel).sort();
    var data = [times];
    var last = {};
    for (var i = 0; i < labels.length; i += 1) {
      var values = byLabel[labels[i]];
      data.push(values);
      for (var j = values.length - 1; j >= 0; j -= 1) {
        if (values[j] !== null) { last[labels[i]] = values[j]; break; }
      }
    }
    figure.setAttribute("data-series", String(labels.length));
    figure.setAttribute("data-last", JSON.stringify(last));
    var empty = figure.querySelector(".empty");
    if (labels.length === 0 || times.length < 2) {
      if (!empty) {
        empty = document.createElement("p");
        empty.className = "empty";
        empty.textContent = "no data yet: the first points come after two samples";
        figure.appendChild(empty);
      }
      return;
    }
    if (empty) { figure.removeChild(empty); }
    var held = plots[name];
    if (held && held.labels.join("\n") === labels.join("\n")) {
      held.plot.setData(data);
      return;
    }
    if (held) { held.plot.destroy(); }
    plots[name] = { plot: make(figure, labels, data), labels: labels };
  }

  function poll(root) {
    var busy = false;
    function once() {
      if (busy || document.hidden) { return; }
      busy = true;
      fetch(root.getAttribute("data-url"), { cache: "no-store" })
        .then(function (resp) { return resp.ok ? resp.json() : null; })
        .then(function (body) {
          if (body === null) { say("charts: the console answered with an error"); return; }
          var figures = root.querySelectorAll("figure[data-chart]");
          for (var i = 0; i < figures.length; i += 1) {
            var name = figures[i].getAttribute("data-chart");
            draw(figures[i], body.times, body.charts[name] || {});
          }
          root.setAttribute("data-points", String(body.times.length));
          say("updated " + new Date().toLocaleTimeString());
        })
        .catch(function () { say("the console does not answer"); })
        .then(function () { busy = false; });
    }
    once();
    var ms = Math.max(500, Math.min(parseInt(root.getAttribute("data-refresh-ms"), 10) || 10000, 10000));
    window.setInterval(once, ms);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("charts");
    if (root) { poll(root); }
  });
})();
