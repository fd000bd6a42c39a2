// Render the math that pymdownx.arithmatex marks with class "arithmatex",
// with KaTeX served from this site (no network needed). Re-run on every page
// load, including Material's instant navigation.
function cudabookRenderMath() {
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
    });
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(cudabookRenderMath);
} else {
  document.addEventListener("DOMContentLoaded", cudabookRenderMath);
}
