/* Search results show a snippet of each page in plain words: Sphinx takes the page's text as it
   is before MathJax runs, so an equation read "\(\lambda_{min}\)" and a code cell's source
   filled the snippet. Here the code cells (and their show/hide buttons) and the page's header
   are left out, and inline TeX becomes text ("λ_min"). Sphinx's searchtools.js, loaded before this deferred file on the
   pages that search, defines `Search`; the search itself starts after this has run. */
const TEX_SYMBOLS = {
  alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η",
  theta: "θ", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", pi: "π", rho: "ρ", sigma: "σ",
  tau: "τ", phi: "φ", varphi: "φ", chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ",
  Lambda: "Λ", Sigma: "Σ", Omega: "Ω", times: "×", cdot: "·", le: "≤", leq: "≤", ge: "≥",
  geq: "≥", ne: "≠", neq: "≠", approx: "≈", sim: "~", to: "→", rightarrow: "→", infty: "∞",
  pm: "±", in: "∈", sum: "Σ", partial: "∂", nabla: "∇", ell: "ℓ", lvert: "|", rvert: "|",
  lVert: "‖", rVert: "‖", "|": "‖", ldots: "…", dots: "…",
};

function plainTeX(text) {
  return text
    .replace(/\\\(|\\\)|\\\[|\\\]|\$\$?/g, "")                 // the delimiters
    .replace(/\\(mathrm|mathbf|mathit|text|operatorname)\s*\{([^{}]*)\}/g, "$2")
    .replace(/\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, "($1)/($2)")
    .replace(/\\([A-Za-z]+|\|)/g, (all, name) => TEX_SYMBOLS[name] ?? name)
    .replace(/\\[,;:! ]/g, " ")                                 // TeX spacing
    .replace(/[{}]/g, "");
}

if (typeof Search !== "undefined" && Search.htmlToText) {
  const pageText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    // code cells, their show/hide buttons, and the page's header buttons and contents list
    page.querySelectorAll(".cell_input, details.hide > summary, .toggle-details, " +
                          ".bd-header-article, .bd-sidebar-secondary, .prev-next-area")
        .forEach((el) => el.remove());
    return plainTeX(pageText(page.documentElement.outerHTML, anchor));
  };
}
