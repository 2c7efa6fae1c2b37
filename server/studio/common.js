// common.js — what every page shares: requests with the bearer key (asked once, kept in
// sessionStorage for the tab), errors in the server's words, saving files, the served models and
// the voice list. Text from the server is only ever set with textContent, never parsed as HTML.
export const $ = (id) => document.getElementById(id);

const KEY = 'qvoice-key';
let keyWaiters = [];

function askKey() {
  $('key-form').hidden = false;
  $('key').focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $('key').value);
  $('key').value = '';
  $('key-form').hidden = true;
  const w = keyWaiters;
  keyWaiters = [];
  w.forEach((f) => f());
});

// fetch with the key; a 401 asks for the key and retries. Returns the Response (any status).
export async function api(path, opts = {}) {
  for (;;) {
    const headers = new Headers(opts.headers || {});
    const key = sessionStorage.getItem(KEY);
    if (key) headers.set('Authorization', 'Bearer ' + key);
    const r = await fetch(path, { ...opts, headers });
    if (r.status !== 401) return r;
    sessionStorage.removeItem(KEY);
    await askKey();
  }
}

// The server's error message of a failed response, as one line.
export async function errorText(r) {
  const t = await r.text();
  try {
    const e = JSON.parse(t).error;
    if (e && e.message) return `${e.message} (HTTP ${r.status}${e.code ? ', ' + e.code : ''})`;
  } catch (_) { /* not JSON */ }
  return `HTTP ${r.status}: ${t.slice(0, 200)}`;
}

export async function apiJson(path, opts) {
  const r = await api(path, opts);
  if (!r.ok) throw new Error(await errorText(r));
  return r.json();
}

// Saves a Blob under a file name (a temporary link, clicked).
export function saveBlob(blob, name) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
}

// 16-bit PCM mono WAV of Int16Array chunks.
export function wavBlob(chunks, rate) {
  const n = chunks.reduce((s, c) => s + c.length, 0);
  const h = new DataView(new ArrayBuffer(44));
  const str = (o, s) => [...s].forEach((ch, i) => h.setUint8(o + i, ch.charCodeAt(0)));
  str(0, 'RIFF'); h.setUint32(4, 36 + 2 * n, true); str(8, 'WAVE'); str(12, 'fmt ');
  h.setUint32(16, 16, true); h.setUint16(20, 1, true); h.setUint16(22, 1, true);
  h.setUint32(24, rate, true); h.setUint32(28, 2 * rate, true); h.setUint16(32, 2, true);
  h.setUint16(34, 16, true); str(36, 'data'); h.setUint32(40, 2 * n, true);
  return new Blob([h, ...chunks], { type: 'audio/wav' });
}

// ---- shared state: served models and voices ---------------------------------------------------

export const state = { models: [], cloning: false, presets: [], voices: [] };
const listeners = [];
export function onVoices(f) { listeners.push(f); }

export async function refreshVoices() {
  const j = await apiJson('/v1/audio/voices');
  state.voices = j.data || [];
  // "voices" names the presets and then the library's voices: keep the presets
  const library = new Set(state.voices.map((v) => v.name || v.id));
  state.presets = (j.voices || []).filter((n) => !library.has(n));
  listeners.forEach((f) => f());
}

// ---- tabs -----------------------------------------------------------------------------------

export const tabs = ['speak', 'clone', 'library'];
export function showPage(name) {
  for (const t of tabs) {
    const on = t === name;
    $('tab-' + t).setAttribute('aria-selected', on);
    $('tab-' + t).tabIndex = on ? 0 : -1;
    $('page-' + t).hidden = !on;
  }
}
