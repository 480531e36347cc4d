// Draws the site's charts. Each figure lives once in charts/NAME.js (plotly JSON without a template), shared by
// every page that shows it; that file calls vlabenchChart(NAME, figure) right after the page's
// <div class="plot" data-chart="NAME">, and the one plotly_white template comes from assets/plot-template.js.
(function () {
  "use strict";
  window.vlabenchChart = function (name, figure) {
    const layout = Object.assign({}, figure.layout, { template: window.VLABENCH_TEMPLATE, autosize: true });
    for (const div of document.querySelectorAll("div.plot[data-chart]")) {
      if (div.dataset.chart !== name || div.dataset.drawn) continue;
      div.dataset.drawn = "yes";
      Plotly.newPlot(div, figure.data, layout, { responsive: true });
    }
  };
})();
