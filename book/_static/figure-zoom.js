/* Figures of a chapter: a click (a tap on a phone) opens the image at full resolution; the theme
   leaves output images unlinked. The figure itself scales to the text column (book.css). */
document.addEventListener("DOMContentLoaded", () => {
  for (const img of document.querySelectorAll("article.bd-article div.cell_output img")) {
    if (img.closest("a")) continue;
    const link = document.createElement("a");
    link.href = img.src;
    link.className = "figure-zoom";
    link.title = "Open the figure at full size";
    img.replaceWith(link);
    link.appendChild(img);
  }
});
