// Each figure.chart drawn by Chart.js from the JSON the page holds (a file:// page fetches
// nothing), once no closed section holds it: hovering or tapping a point names it with its
// figures; a click opens its record (on a touch screen the first tap names the point, a second
// tap on it opens the record). Both axes start at zero. The key is the list under the canvas,
// never over it. Text is 12 px whatever the screen: the canvas is drawn at its own width, never
// scaled down.
(function () {
  if (!window.Chart) return;  // the library beside the page is missing: the key still names every point
  Chart.defaults.font.size = 12;
  Chart.defaults.color = "#333";
  // A chart in a closed section is drawn when the section opens, not at load: a page of many
  // GPUs' sections would otherwise spend a phone's core on charts no one has opened.
  var waiting = [];
  document.querySelectorAll("figure.chart").forEach(function (fig) {
    if (fig.closest("details:not([open])")) waiting.push(fig); else draw(fig);
  });
  document.addEventListener("toggle", function () {  // toggle does not bubble: caught on its way down
    waiting = waiting.filter(function (fig) {
      if (fig.closest("details:not([open])")) return true;
      draw(fig);
      return false;
    });
  }, true);

  function draw(fig) {
    var d = JSON.parse(fig.querySelector("script.chart-data").textContent);
    var pts = d.points;
    var scatter = {
      type: "scatter", data: pts, pointStyle: pts.map(function (p) { return p.marker; }),
      pointBorderColor: pts.map(function (p) { return p.colour; }),
      pointBackgroundColor: pts.map(function (p) { return p.front ? p.colour : "rgba(255,255,255,0.9)"; }),
      pointRadius: 5, pointHoverRadius: 7, pointBorderWidth: 1.5, pointHitRadius: 8, order: 1
    };
    var frontier = {
      type: "line", data: d.frontier, stepped: "before", borderColor: "#999", borderWidth: 1,
      pointRadius: 0, pointHitRadius: 0, pointHoverRadius: 0, order: 2
    };
    new Chart(fig.querySelector("canvas"), {
      type: "scatter", data: {datasets: [scatter, frontier]},
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: {mode: "nearest", intersect: true},
        scales: {
          x: {type: "linear", beginAtZero: true, grace: "5%", title: {display: true, text: d.x_label}},
          y: {type: "linear", beginAtZero: true, grace: "5%", title: {display: true, text: d.y_label}}
        },
        plugins: {
          legend: {display: false},
          tooltip: {
            filter: function (item) { return item.datasetIndex === 0; },
            titleFont: {size: 12}, bodyFont: {size: 12},
            callbacks: {
              title: function (items) { return items.length ? pts[items[0].dataIndex].title : ""; },
              label: function (item) { return pts[item.dataIndex].lines; }
            }
          }
        },
        onHover: function (e, els) {
          e.native.target.style.cursor = els.some(function (el) { return el.datasetIndex === 0; }) ? "pointer" : "";
        },
        onClick: function (e, els, chart) {
          var el = els.filter(function (x) { return x.datasetIndex === 0; })[0];
          if (!el) return;
          if (e.native && e.native.pointerType === "touch" && chart.$tapped !== el.index) {
            chart.$tapped = el.index;  // the first tap has named it: the next one on it opens it
            return;
          }
          window.location.href = pts[el.index].href;
        }
      }
    });
  }
})();
