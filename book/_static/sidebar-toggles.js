/* The sidebar buttons in the article header (☰ for the chapters, the contents button for the
   page's sections) do nothing with sphinx-book-theme 1.3.0 on pydata-sphinx-theme 0.17.1: both
   themes bind their handlers with document.querySelector(".primary-toggle") (and
   ".secondary-toggle"), which finds the buttons of pydata's own navbar, the first in the page,
   which sphinx-book-theme hides. Mended here, not by pinning older themes, so that the
   environment stays as pyproject.toml resolves it (sphinx-book-theme 1.3.0 requires pydata
   0.17.1 exactly): a click on any other toggle is forwarded to the bound one, whose code then
   collapses the sidebar on a wide screen or opens it as a drawer on a phone. Remove this file
   when a theme release binds every toggle (tests/test_book_browser.py will tell). */
document.addEventListener("DOMContentLoaded", () => {
  for (const selector of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(selector);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
});
