// Small DOM helpers. Text always goes in through textContent, never as HTML, so nothing a
// session says can become markup.

/**
 * Creates an element. `props`: `class`, `text`, `dataset` (an object), `on<event>` (a listener),
 * `hidden`/`disabled` and other boolean attributes (true/false), or any other attribute.
 */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== undefined && child !== null && child !== false) node.append(child);
  }
  return node;
}

export const byId = (id) => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`The page has no #${id}`);
  return node;
};

/** JSON for people: indented, and never throws. */
export function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A short one-line preview of a JSON value. */
export function preview(value, max = 120) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch {
    text = String(value);
  }
  if (text === undefined) return '';
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A description of an error for the page: code and message, never a stack or a header. */
export function describeError(error) {
  if (error && typeof error === 'object' && typeof error.code === 'string') {
    return `${error.message} (${error.code})`;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}
