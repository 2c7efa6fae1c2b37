// library.js — the Library page: every voice of the server's library (name, language, created,
// consent, size), a text filter, download of the .qvoice, upload of one, delete (asked twice),
// and "Speak" with a voice.
import { $, api, apiJson, errorText, saveBlob, state, onVoices, refreshVoices, showPage } from './common.js';
import { speakWith } from './speak.js';

function button(text, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

function kib(n) { return n >= 1048576 ? `${(n / 1048576).toFixed(1)} MiB` : `${Math.ceil(n / 1024)} KiB`; }

function render() {
  const q = $('library-filter').value.trim().toLowerCase();
  const body = $('library').tBodies[0];
  body.replaceChildren();
  for (const v of state.voices) {
    if (q && ![v.name, v.language, v.id].some((s) => (s || '').toLowerCase().includes(q))) continue;
    const tr = document.createElement('tr');
    tr.dataset.id = v.id;
    const cell = (text, cls) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls) td.className = cls;
      tr.append(td);
      return td;
    };
    cell(v.name || '(no name)', 'name').title = v.id;
    cell(v.language || '—');
    cell(v.created_at ? new Date(v.created_at * 1000).toISOString().slice(0, 16).replace('T', ' ') : '—');
    cell(v.consent ? 'yes' : 'no');
    cell(kib(v.bytes || 0));
    cell(v.has_icl ? `${(v.icl_seconds || 0).toFixed(1)} s` : 'no');
    const actions = cell('');
    const label = v.name || v.id;
    const speak = button('Speak', () => { showPage('speak'); speakWith(v.id); });
    speak.setAttribute('aria-description', `with ${label}`);
    const dl = button('Download', async () => {
      try {
        const r = await api(`/v1/audio/voices/${encodeURIComponent(v.id)}?download=1`);
        if (!r.ok) throw new Error(await errorText(r));
        saveBlob(await r.blob(), `${(v.name || v.id).replace(/[^\w.-]+/g, '_')}.qvoice`);
      } catch (e) { $('library-error').textContent = e.message; }
    });
    dl.setAttribute('aria-description', label);
    const del = button('Delete', async () => {
      if (!del.dataset.armed) { // asked twice: no modal dialog
        del.dataset.armed = '1';
        del.textContent = 'Confirm delete';
        return;
      }
      try {
        const r = await api(`/v1/audio/voices/${encodeURIComponent(v.id)}`, { method: 'DELETE' });
        if (!r.ok) throw new Error(await errorText(r));
        await refreshVoices();
      } catch (e) { $('library-error').textContent = e.message; }
    });
    del.setAttribute('aria-description', label);
    actions.append(speak, ' ', dl);
    if (v.deletable !== false) actions.append(' ', del); // a user key may not delete others' voices
    body.append(tr);
  }
  $('library-presets').textContent = state.presets.length
    ? `Preset speakers of the model: ${state.presets.join(', ')}` : '';
}

async function upload() {
  const f = $('library-upload').files[0];
  if (!f) return;
  $('library-error').textContent = '';
  const fd = new FormData();
  fd.append('audio_sample', f, f.name);
  const consent = $('library-consent').value.trim();
  if (consent) fd.append('consent', consent);
  try {
    await apiJson('/v1/audio/voices', { method: 'POST', body: fd });
    await refreshVoices();
  } catch (e) {
    $('library-error').textContent = `${f.name}: ${e.message}`;
  } finally {
    $('library-upload').value = '';
  }
}

export function initLibrary() {
  onVoices(render);
  $('library-filter').addEventListener('input', render);
  $('library-pick').addEventListener('click', () => $('library-upload').click());
  $('library-upload').addEventListener('change', upload);
  $('library-refresh').addEventListener('click', () =>
    refreshVoices().catch((e) => { $('library-error').textContent = e.message; }));
}
