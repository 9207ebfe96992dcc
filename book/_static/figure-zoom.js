/* Figures of a chapter: a click opens the image at full size (the theme leaves output images
   unlinked), and an image never shrinks below 72% of its size, so that its tick labels stay
   readable on a phone: there its output box scrolls sideways instead (book.css). */
const MIN_FIGURE_SCALE = 0.72;

function keepReadable(img) {
  img.style.minWidth = `${Math.round(MIN_FIGURE_SCALE * img.naturalWidth)}px`;
}

document.addEventListener("DOMContentLoaded", () => {
  for (const img of document.querySelectorAll("article.bd-article div.cell_output img")) {
    if (!img.closest("a")) {
      const link = document.createElement("a");
      link.href = img.src;
      link.className = "figure-zoom";
      link.title = "Open the figure at full size";
      img.replaceWith(link);
      link.appendChild(img);
    }
    if (img.complete && img.naturalWidth) keepReadable(img);
    else img.addEventListener("load", () => keepReadable(img), {once: true});
  }
});
