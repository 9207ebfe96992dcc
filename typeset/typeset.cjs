// Typesets the math of built HTML pages as SVG, in place, so that a reader's browser loads no
// MathJax (0.9 MB a page otherwise). Called by the book's build (replicate.harness.typeset_math)
// with the pages to rewrite; prints one JSON line: {"pages": n, "math": m}.
//
// Sphinx writes TeX as <span class="math notranslate nohighlight">\(...\)</span> (inline) and
// <div class="math notranslate nohighlight">\[...\]</div> (display). Each becomes MathJax's SVG
// with its MathML beside it for screen readers (assistive MathML, as the browser version adds).
// Glyph outlines are stored once per page (the "global" font cache) in a hidden <svg> at the top
// of <body>, and MathJax's small stylesheet goes into <head>.
'use strict';
const fs = require('fs');
const {mathjax} = require('mathjax-full/js/mathjax.js');
const {TeX} = require('mathjax-full/js/input/tex.js');
const {SVG} = require('mathjax-full/js/output/svg.js');
const {liteAdaptor} = require('mathjax-full/js/adaptors/liteAdaptor.js');
const {RegisterHTMLHandler} = require('mathjax-full/js/handlers/html.js');
const {AssistiveMmlHandler} = require('mathjax-full/js/a11y/assistive-mml.js');
const {AllPackages} = require('mathjax-full/js/input/tex/AllPackages.js');

// The browser's "require" and "autoload" fetch packages on demand; here every package is loaded.
// Without "noundefined" an unknown macro is an error that stops the build, not red text on a page.
const PACKAGES = AllPackages.filter((name) => !['require', 'autoload', 'noundefined'].includes(name));
const MATH = /(<(span|div) class="math notranslate nohighlight">)([\s\S]*?)(<\/\2>)/g;
const ENTITIES = {'&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'", '&#x27;': "'"};

const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));
const svg = new SVG({fontCache: 'global'});
const doc = mathjax.document('', {InputJax: new TeX({packages: PACKAGES}), OutputJax: svg});

// What only the browser's MathJax reads (its menu and explorer), or what HTML implies: about a
// quarter of each expression's bytes.
const UNUSED = ['data-mml-node', 'data-c', 'data-mjx-texclass', 'stroke', 'stroke-width', 'xmlns',
  'xmlns:xlink', 'unselectable'];

function trim(node) {
  if (adaptor.kind(node) === '#text') return;
  for (const name of UNUSED) adaptor.removeAttribute(node, name);
  for (const child of adaptor.childNodes(node)) trim(child);
}

function texOf(html, display) {
  const tex = html.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (e) => ENTITIES[e]).trim();
  const [open, close] = display ? ['\\[', '\\]'] : ['\\(', '\\)'];
  if (!tex.startsWith(open) || !tex.endsWith(close)) {
    throw new Error(`math without its ${open} ${close} delimiters: ${tex.slice(0, 80)}`);
  }
  return tex.slice(open.length, -close.length);
}

let math = 0;
const files = process.argv.slice(2);
for (const file of files) {
  const page = fs.readFileSync(file, 'utf8');
  svg.clearFontCache();
  let count = 0;
  const body = page.replace(MATH, (all, open, tag, tex, close) => {
    const display = tag === 'div';
    const node = doc.convert(texOf(tex, display), {display, em: 16, ex: 8, containerWidth: 1280});
    const errors = adaptor.tags(node, 'merror');
    if (errors.length) {
      throw new Error(`${file}: TeX error in ${tex.slice(0, 80)}: ${adaptor.textContent(errors[0])}`);
    }
    trim(node);
    count += 1;
    return open + adaptor.outerHTML(node) + close;
  });
  if (count === 0) continue;
  const style = `<style id="MJX-SVG-styles">${adaptor.textContent(svg.styleSheet(doc))}</style>`;
  const glyphs = adaptor.outerHTML(svg.pageElements(doc));
  const out = body.replace('</head>', style + '</head>').replace(/(<body[^>]*>)/, `$1${glyphs}`);
  fs.writeFileSync(file, out);
  math += count;
}
console.log(JSON.stringify({pages: files.length, math}));
