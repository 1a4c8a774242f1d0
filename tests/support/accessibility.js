// Run in the page by `Browser::accessibility_problems` (a function body): what stops
// a person using the page on screen, as a list of sentences.
// - The page scrolls sideways (content wider than the viewport).
// - A visible input, select or textarea has no label (a <label for>, a wrapping
//   <label>, aria-label or aria-labelledby).
// - A visible button or link has no accessible name.
// - Visible text has less contrast with its background than WCAG AA asks (4.5:1,
//   3:1 for large text), backgrounds found by walking up to the first opaque one.
const problems = [];
// Rendered and not skipped (a closed <details> keeps its content laid out but unrendered).
const visible = (el) => {
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && el.checkVisibility({ visibilityProperty: true, contentVisibilityAuto: true });
};
const describe = (el) => el.outerHTML.slice(0, 120);

// The layout viewport (a phone zooms out to show content wider than it, so
// `innerWidth` would grow with the overflow).
const viewport = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth > viewport + 1) {
  const wide = [...document.querySelectorAll('main *, header *')].filter((el) => el.getBoundingClientRect().right > viewport + 1
    && !el.closest('table, pre'));
  problems.push(`the page is ${document.documentElement.scrollWidth}px wide in a ${viewport}px viewport: ${wide.slice(0, 3).map(describe).join(', ')}`);
}

for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
  if (!visible(el)) continue;
  const labelled = (el.id && document.querySelector(`label[for="${CSS.escape(el.id)}"]`)) || el.closest('label')
    || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby');
  if (!labelled) problems.push(`no label: ${describe(el)}`);
}

for (const el of document.querySelectorAll('button, a[href]')) {
  if (!visible(el)) continue;
  if (!(el.innerText || '').trim() && !el.getAttribute('aria-label') && !el.getAttribute('title')) problems.push(`no name: ${describe(el)}`);
}

const parse = (c) => {
  const m = c.match(/rgba?\(([^)]+)\)/);
  if (!m) return null;
  const [r, g, b, a = 1] = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
  return { r, g, b, a };
};
const luminance = ({ r, g, b }) => {
  const f = (v) => { const x = v / 255; return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const background = (el) => {
  for (let e = el; e; e = e.parentElement) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c.a >= 0.99) return c;
  }
  return { r: 255, g: 255, b: 255, a: 1 };
};
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const seen = new Set();
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const el = node.parentElement;
  if (!el || seen.has(el) || !node.textContent.trim() || el.closest('svg, [hidden], [aria-hidden="true"]') || !visible(el)) continue;
  seen.add(el);
  const s = getComputedStyle(el);
  const fg = parse(s.color);
  if (!fg || Number(s.opacity) < 1) continue;
  const [l1, l2] = [luminance(fg), luminance(background(el))].sort((a, b) => b - a);
  const ratio = (l1 + 0.05) / (l2 + 0.05);
  const size = parseFloat(s.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(s.fontWeight) >= 700);
  if (ratio < (large ? 3 : 4.5)) problems.push(`contrast ${ratio.toFixed(2)}:1 for ${describe(el)}`);
}
return problems;
