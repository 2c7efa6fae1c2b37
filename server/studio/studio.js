// studio.js — the page's entry: tab keys, the served model, then the three pages (speak.js,
// clone.js, library.js; shared helpers in common.js).
import { $, state, showPage, tabs, refreshVoices } from './common.js';
import { initSpeak } from './speak.js';
import { initClone } from './clone.js';
import { initLibrary } from './library.js';

tabs.forEach((t, i) => {
  $('tab-' + t).addEventListener('click', () => showPage(t));
  $('tab-' + t).addEventListener('keydown', (e) => {
    const d = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
    if (!d) return;
    const next = tabs[(i + d + tabs.length) % tabs.length];
    showPage(next);
    $('tab-' + next).focus();
  });
});

async function start() {
  const ready = await (await fetch('/ready')).json();
  state.models = ready.models || [];
  state.cloning = !!ready.cloning;
  const m = state.models[0];
  $('server-info').textContent = m
    ? `model ${m.id} (${m.type}, ${m.size})${state.cloning ? ', cloning on' : ', cloning off'}`
    : 'no model';
  initSpeak();
  initClone();
  initLibrary();
  await refreshVoices();
  document.body.dataset.ready = '1';
}

start().catch((e) => { $('server-info').textContent = 'cannot reach the server: ' + e.message; });
