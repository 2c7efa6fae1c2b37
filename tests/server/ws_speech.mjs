// ws_speech.mjs — a real WebSocket client (the ws npm package) for WS /v1/audio/speech/stream,
// driven by tests/unit/test_server_ws.c and scripts/serve-bench.sh. Prints one JSON line.
//   node ws_speech.mjs stream URL CONFIG_JSON TEXT OUTDIR  text fed word by word at 15 tokens/s
//                                                         (the first audio after the first end,
//                                                         a sentence's or with split_granularity
//                                                         clause a clause's; and after the first
//                                                         input.text: first_audio_ms)
//   node ws_speech.mjs errors URL                         every refusal as an error event
//   node ws_speech.mjs oversize URL BYTES                 one text message of BYTES: the close code
//   node ws_speech.mjs abort URL CONFIG_JSON TEXT         leaves abruptly after the first audio
//   node ws_speech.mjs flood URL                          100 sentences at once: the queue's limit
//   node ws_speech.mjs idle URL                           sends nothing: the close code
//   node ws_speech.mjs handshake URL                      the upgrade's HTTP status or "open"
import { writeFileSync } from 'node:fs';
import WebSocket from 'ws';

const [mode, url, ...args] = process.argv.slice(2);
const TOKEN_MS = 1000 / 15;
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const out = (o) => { console.log(JSON.stringify(o)); process.exit(0); };

function open() {
    return new Promise((resolve, reject) => {
        const ws = new WebSocket(url);
        ws.on('open', () => resolve(ws));
        ws.on('unexpected-response', (req, res) => reject(new Error(`status ${res.statusCode}`)));
        ws.on('error', reject);
    });
}

// Collects events: text messages parsed, binary frames as {type:'binary', bytes, t}.
function collect(ws) {
    const ev = [];
    const waiters = [];
    const push = (e) => {
        ev.push(e);
        for (const w of waiters.splice(0)) w();
    };
    ws.on('message', (data, isBinary) => push(isBinary ? { type: 'binary', data, t: now() }
                                                        : { ...JSON.parse(data), t: now() }));
    ws.on('close', (code) => push({ type: 'closed', code, t: now() }));
    const until = async (pred, ms = 60000) => {
        const end = now() + ms;
        for (;;) {
            const e = ev.find(pred);
            if (e) return e;
            if (now() > end) return null;
            await new Promise((r) => { waiters.push(r); setTimeout(r, 100); });
        }
    };
    return { ev, until };
}

async function stream() {
    const [config, text, outdir] = args;
    const ws = await open();
    const { ev, until } = collect(ws);
    ws.send(JSON.stringify({ type: 'session.config', ...JSON.parse(config) }));
    const words = text.split(/(?<= )/); // LLM-like pieces, each with its trailing space
    const end = JSON.parse(config).split_granularity === 'clause' ? /[.!?,;]\s$/ : /[.!?]\s$/;
    let firstEnd = null;
    const t0 = now();
    for (const w of words) {
        ws.send(JSON.stringify({ type: 'input.text', text: w }));
        // the first sentence (clause) is complete once the piece after its end mark has arrived
        if (firstEnd === null && end.test(w)) firstEnd = now();
        await sleep(TOKEN_MS);
    }
    const doneAt = now();
    ws.send(JSON.stringify({ type: 'input.done' }));
    await until((e) => e.type === 'session.done');
    ws.send(JSON.stringify({ type: 'session.close' }));
    await until((e) => e.type === 'closed', 10000);
    const bins = ev.filter((e) => e.type === 'binary');
    const sentences = [];
    let cur = null;
    for (const e of ev) {
        if (e.type === 'audio.start') cur = { text: e.sentence_text, chunks: [] };
        else if (e.type === 'binary' && cur) cur.chunks.push(e.data);
        else if (e.type === 'audio.done' && cur) {
            const buf = Buffer.concat(cur.chunks);
            writeFileSync(`${outdir}/s${sentences.length}.pcm`, buf);
            sentences.push({ text: cur.text, bytes: buf.length, total_bytes: e.total_bytes,
                             error: e.error, frames: cur.chunks.length });
            cur = null;
        }
    }
    out({
        types: ev.map((e) => e.type).filter((t, i, a) => t !== 'binary' || a[i - 1] !== 'binary'),
        sentences,
        first_audio_before_done: bins.length > 0 && bins[0].t < doneAt,
        first_audio_after_sentence_end_ms: bins.length && firstEnd ? bins[0].t - firstEnd : null,
        first_audio_ms: bins.length ? bins[0].t - t0 : null,
        warnings: ev.filter((e) => e.type === 'warning').map((e) => e.message),
        errors: ev.filter((e) => e.type === 'error').map((e) => e.param || e.code),
        close: ev.find((e) => e.type === 'closed')?.code ?? null,
    });
}

async function errors() {
    const ws = await open();
    const { ev, until } = collect(ws);
    const sends = [
        'not json',
        JSON.stringify({ type: 'nope' }),
        JSON.stringify({ type: 'session.config', input: 'x' }),
        JSON.stringify({ type: 'session.config', response_format: 'mp3' }),
        JSON.stringify({ type: 'session.config', stream_audio: 'yes' }),
        JSON.stringify({ type: 'session.config', temperature: -1 }),
        JSON.stringify({ type: 'session.config', voice: 'nobody' }),
        JSON.stringify({ type: 'session.config', style_strength: 99 }),
        JSON.stringify({ type: 'session.config', colour: 'red' }),
        JSON.stringify({ type: 'session.config', split_granularity: 'word' }),
        JSON.stringify({ type: 'input.text', text: 5 }),
        JSON.stringify({ type: 'input.text', text: 'bad [pause:xx] tag. ' }),
    ];
    for (const s of sends) ws.send(s);
    ws.send(Buffer.from([1, 2, 3])); // binary
    const n = sends.length + 1;
    await until(() => ev.filter((e) => e.type === 'error').length >= n, 10000);
    ws.ping('hi');
    const pong = await new Promise((r) => { ws.once('pong', (d) => r(d.toString())); setTimeout(() => r(null), 5000); });
    ws.close(1000);
    await until((e) => e.type === 'closed', 5000);
    out({ errors: ev.filter((e) => e.type === 'error').map((e) => e.param || e.code),
          pong, close: ev.find((e) => e.type === 'closed')?.code ?? null });
}

async function oversize() {
    const ws = await open();
    const { ev, until } = collect(ws);
    ws.send('x'.repeat(Number(args[0])));
    const c = await until((e) => e.type === 'closed', 10000);
    out({ close: c ? c.code : null });
}

async function abort() {
    const [config, text] = args;
    const ws = await open();
    const { until } = collect(ws);
    ws.send(JSON.stringify({ type: 'session.config', ...JSON.parse(config) }));
    ws.send(JSON.stringify({ type: 'input.text', text }));
    const b = await until((e) => e.type === 'binary', 60000);
    ws.terminate(); // no close frame: the TCP connection just ends
    out({ audio: !!b });
}

async function flood() {
    const ws = await open();
    const { ev, until } = collect(ws);
    ws.send(JSON.stringify({ type: 'session.config', max_seconds: 0.2 }));
    const sentence = `${'word '.repeat(39)}end. `; // 200 characters
    for (let i = 0; i < 100; i++) ws.send(JSON.stringify({ type: 'input.text', text: sentence }));
    const e = await until((x) => x.type === 'error', 20000);
    ws.terminate();
    out({ error: e ? `${e.code}:${e.param}` : null, spoken: ev.filter((x) => x.type === 'audio.start').length });
}

async function idle() {
    const ws = await open();
    const { until } = collect(ws);
    const c = await until((e) => e.type === 'closed', 30000);
    out({ close: c ? c.code : null });
}

async function handshake() {
    try {
        const ws = await open();
        ws.close();
        out({ status: 'open' });
    } catch (e) {
        out({ status: String(e.message) });
    }
}

const modes = { stream, errors, oversize, abort, flood, idle, handshake };
if (!modes[mode]) {
    console.error('usage: node ws_speech.mjs stream|errors|oversize|abort|flood|idle|handshake URL ...');
    process.exit(2);
}
modes[mode]().catch((e) => { console.log(JSON.stringify({ fail: String(e.message) })); process.exit(1); });
