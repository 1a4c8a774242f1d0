// DOM helpers: elements are built with text nodes only (no innerHTML), so API data
// can never become markup.

/** `h('a', { href: '/x' }, 'text', child)`: attributes, `on*` listeners, children. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A table with a caption, header cells and one row per item. */
export function table(caption, headers, rows, empty = 'Nothing yet.') {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => h('td', {}, c))))));
}

/** A labelled form field; `control` gets the id the label points at. */
export function field(label, control, hint) {
  const id = control.id || `f-${label.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  control.id = id;
  if (!control.name) control.name = id.slice(2);
  return h('div', { class: 'field' }, h('label', { for: id }, label), control,
    hint ? h('small', {}, hint) : null);
}

/** A `<select>` from `[value, text]` pairs. */
export function select(options, value) {
  return h('select', {}, options.map(([v, t]) => h('option', { value: v, selected: v === value }, t)));
}

/** A message area read out by screen readers when it changes. */
export function status() {
  return h('p', { class: 'status', role: 'status', 'aria-live': 'polite' });
}

export function time(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return h('time', { datetime: iso }, d.toISOString().replace('T', ' ').slice(0, 19) + ' UTC');
}

export function code(text) {
  return h('code', {}, text);
}

/** A small button that copies `id` to the clipboard (the id is its tooltip and
 * part of its accessible name), so names can stand in for ids everywhere. */
export function copyId(id, what = 'id') {
  const button = h('button', { type: 'button', class: 'copy', title: id, 'data-id': id, 'aria-label': `Copy ${what} ${id}` }, 'Copy id');
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(id);
      button.textContent = 'Copied';
    } catch {
      // No clipboard (an insecure origin, a denied permission): show the id to copy by hand.
      button.replaceWith(h('code', { class: 'copied' }, id));
      return;
    }
    setTimeout(() => { button.textContent = 'Copy id'; }, 1500);
  });
  return button;
}

/** A name with its id one click away; the id itself when there is no name. */
export function named(name, id, href) {
  const text = name || id || '—';
  const label = href ? h('a', { href }, text) : h(name ? 'span' : 'code', {}, text);
  return h('span', { class: 'named' }, label, id && name ? [' ', copyId(id)] : null);
}

