// What the token in use lets the page do. Once api.js knows it for a read token (a write call
// was refused with it), every action button (data-needs="write") is disabled with a title
// saying why, and each view's note ([data-readonly-note]) is shown, until the token changes.

import { NEEDS, readOnly } from './api.js';

const WHY = `Needs ${NEEDS.write}: the token in use is a read token, which opens views only.`;

// Sets whether button may act by its view's own rules (a pending job, a group with an owner);
// it is enabled when that holds and the token in use is not known to be a read token.
// Returns button.
export function usable(button, ok = true) {
  button.dataset.needs = 'write';
  button.dataset.usable = ok ? 'yes' : 'no';
  apply(button, readOnly());
  return button;
}

function apply(button, ro) {
  button.disabled = ro || button.dataset.usable === 'no';
  if (ro) button.title = WHY;
  else button.removeAttribute('title');
}

// Shows the state of readOnly() on every action button and note of the page.
export function applyAll() {
  const ro = readOnly();
  document.querySelectorAll('[data-needs="write"]').forEach((b) => apply(b, ro));
  document.querySelectorAll('[data-readonly-note]').forEach((n) => { n.hidden = !ro; });
}
