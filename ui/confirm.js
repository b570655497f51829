// The confirmation asked before each action that changes something.

import { $ } from './dom.js';

// Shows text with OK and Cancel (Cancel has the focus; Escape cancels); resolves to whether
// OK was chosen.
export function confirmAction(text, okLabel = 'OK') {
  const dlg = $('confirm-dialog');
  if (dlg.open) return Promise.resolve(false);
  $('confirm-text').textContent = text;
  $('confirm-ok').textContent = okLabel;
  dlg.returnValue = '';
  dlg.showModal();
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
  });
}
