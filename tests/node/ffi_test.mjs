// ffi_test.mjs — drives liblacuna.so from Node.js through koffi: a token trie of three action
// names gives exactly one name; a JSON schema gives JSON that parses with the required keys;
// bad input gives a status and a message. Usage: node ffi_test.mjs LIBLACUNA.so MODEL.gguf
import assert from 'node:assert/strict';
import koffi from 'koffi';

const [libPath, modelPath] = process.argv.slice(2);
if (!libPath || !modelPath) {
  console.error('usage: node ffi_test.mjs LIBLACUNA.so MODEL.gguf');
  process.exit(2);
}

const lib = koffi.load(libPath);

const Model = koffi.opaque('lacuna_model');
const Context = koffi.opaque('lacuna_context');
const Stream = koffi.opaque('lacuna_stream');

const ContextParams = koffi.struct('lacuna_context_params', {
  n_ctx: 'uint32_t',
  n_batch: 'uint32_t',
  n_threads: 'int32_t',
  n_branches: 'uint32_t',
  backend_sampling: 'int32_t',
});
const StreamParams = koffi.struct('lacuna_stream_params', {
  max_tokens: 'int32_t',
  temperature: 'float',
  top_p: 'float',
  top_k: 'int32_t',
  min_p: 'float',
  seed: 'uint32_t',
  n_threads: 'int32_t',
  grammar: 'const char *',
  json_schema: 'const char *',
  schema_compact: 'int32_t',
  token_trie: 'const char *',
  token_trie_len: 'size_t',
  token_trie_mode: 'int32_t',
  stop_strings: 'void *',
  n_stop_strings: 'size_t',
});
const Step = koffi.struct('lacuna_step', {
  tokens: 'void *',
  n_tokens: 'size_t',
  text: 'void *',
  text_len: 'size_t',
  done: 'int32_t',
  stop_reason: 'int32_t',
});
const Stats = koffi.struct('lacuna_stats', {
  prompt_tokens: 'uint64_t',
  tokens_emitted: 'uint64_t',
  forward_passes: 'uint64_t',
  tokens_skipped: 'uint64_t',
  tokens_batch_filled: 'uint64_t',
  draft_proposed: 'uint64_t',
  draft_accepted: 'uint64_t',
  jump_tokens: 'uint64_t',
  prefill_ms: 'double',
  decode_ms: 'double',
  mask_ms: 'double',
  sample_ms: 'double',
  total_ms: 'double',
  stop_reason: 'int32_t',
});

const api = {
  abiVersion: lib.func('uint32_t lacuna_abi_version(void)'),
  lastError: lib.func('const char *lacuna_last_error(void)'),
  statusName: lib.func('const char *lacuna_status_name(int status)'),
  modelLoad: lib.func('int lacuna_model_load(const char *path, void *params, _Out_ lacuna_model **out)'),
  modelFree: lib.func('void lacuna_model_free(lacuna_model *model)'),
  tokenize: lib.func('int lacuna_tokenize(lacuna_model *model, const char *text, size_t len, int32_t add_special, int32_t parse_special, _Out_ int32_t *tokens, size_t capacity, _Out_ size_t *n_tokens)'),
  contextDefaults: lib.func('lacuna_context_params lacuna_context_default_params(void)'),
  contextCreate: lib.func('int lacuna_context_create(lacuna_model *model, const lacuna_context_params *params, _Out_ lacuna_context **out)'),
  contextFree: lib.func('void lacuna_context_free(lacuna_context *ctx)'),
  streamDefaults: lib.func('lacuna_stream_params lacuna_stream_default_params(void)'),
  streamOpen: lib.func('int lacuna_stream_open(lacuna_context *ctx, const lacuna_stream_params *params, _Out_ lacuna_stream **out)'),
  streamClose: lib.func('void lacuna_stream_close(lacuna_stream *stream)'),
  prefillText: lib.func('int lacuna_stream_prefill_text(lacuna_stream *stream, const char *text, size_t len, int32_t add_special, int32_t parse_special)'),
  next: lib.func('int lacuna_stream_next(lacuna_stream *stream, _Out_ lacuna_step *step)'),
  reset: lib.func('int lacuna_stream_reset(lacuna_stream *stream)'),
  text: lib.func('int lacuna_stream_text(lacuna_stream *stream, _Out_ void **text, _Out_ size_t *len)'),
  setTrie: lib.func('int lacuna_stream_set_token_trie(lacuna_stream *stream, const char *json, size_t len, int32_t mode)'),
  clearTrie: lib.func('int lacuna_stream_clear_token_trie(lacuna_stream *stream)'),
  setSchema: lib.func('int lacuna_stream_set_json_schema(lacuna_stream *stream, const char *schema, size_t len, int32_t compact)'),
  chosenLeaf: lib.func('int lacuna_stream_chosen_leaf(lacuna_stream *stream, _Out_ const char **name)'),
  stats: lib.func('int lacuna_stream_stats(lacuna_stream *stream, _Out_ lacuna_stats *stats)'),
};

const LACUNA_OK = 0;
const STOP_CONSTRAINT_COMPLETED = 2;

function ok(status, what) {
  assert.equal(status, LACUNA_OK, `${what}: ${api.statusName(status)}: ${api.lastError()}`);
}

function tokenize(model, text) {
  const bytes = Buffer.byteLength(text);
  const tokens = new Int32Array(bytes + 8);
  const n = [0];
  ok(api.tokenize(model, text, bytes, 0, 0, tokens, tokens.length, n), 'tokenize');
  return Array.from(tokens.subarray(0, Number(n[0])));
}

// Pulls steps until done; returns the token count, the whole text and the stop reason.
function drain(stream) {
  let nTokens = 0;
  let stop = -1;
  for (let i = 0; i < 1000; ++i) {
    const step = {};
    ok(api.next(stream, step), 'next');
    nTokens += Number(step.n_tokens);
    if (step.done) {
      stop = step.stop_reason;
      break;
    }
  }
  const ptr = [null];
  const len = [0];
  ok(api.text(stream, ptr, len), 'text');
  const text = Number(len[0]) === 0 ? '' : koffi.decode(ptr[0], 'char', Number(len[0]));
  return { nTokens, text, stop };
}

function generate(stream, prompt) {
  ok(api.prefillText(stream, prompt, Buffer.byteLength(prompt), 1, 0), 'prefill_text');
  return drain(stream);
}

assert.equal(api.abiVersion(), 2);

// A missing model file: a status and a message, no crash.
{
  const out = [null];
  const status = api.modelLoad('/no/such/model.gguf', null, out);
  assert.equal(api.statusName(status), 'LACUNA_ERR_NOT_FOUND');
  assert.match(api.lastError(), /model\.gguf/);
}

const modelOut = [null];
ok(api.modelLoad(modelPath, null, modelOut), 'model_load');
const model = modelOut[0];

const cp = api.contextDefaults();
cp.n_ctx = 512;
cp.n_threads = 2;
const ctxOut = [null];
ok(api.contextCreate(model, cp, ctxOut), 'context_create');
const ctx = ctxOut[0];

const sp = api.streamDefaults();
sp.max_tokens = 200;
const streamOut = [null];
ok(api.streamOpen(ctx, sp, streamOut), 'stream_open');
const stream = streamOut[0];

// Token trie of three action names.
const names = ['search_web', 'send_email', 'read_file'];
const payload = JSON.stringify({
  modelId: 'tiny-llama3',
  descriptors: [{ path: 'action', leaves: names.map((name) => ({ name, tokens: tokenize(model, name) })) }],
});
ok(api.setTrie(stream, payload, Buffer.byteLength(payload), 0), 'set_token_trie');
for (const prompt of ['The next action is:', 'Pick a tool:']) {
  ok(api.reset(stream), 'reset');
  const out = generate(stream, prompt);
  assert.ok(names.includes(out.text), `trie output ${JSON.stringify(out.text)} is not one of the names`);
  assert.equal(out.stop, STOP_CONSTRAINT_COMPLETED);
  const leaf = [null];
  ok(api.chosenLeaf(stream, leaf), 'chosen_leaf');
  assert.equal(leaf[0], out.text);
  const stats = {};
  ok(api.stats(stream, stats), 'stats');
  assert.equal(Number(stats.tokens_emitted), out.nTokens);
  console.log(`trie: ${JSON.stringify(out.text)} in ${out.nTokens} tokens, ${stats.forward_passes} forward passes`);
}

// A malformed payload fails with a message and leaves the trie in place.
{
  const status = api.setTrie(stream, '{"modelId": 1', 13, 0);
  assert.equal(api.statusName(status), 'LACUNA_ERR_PARSE');
  assert.ok(api.lastError().length > 0);
  ok(api.reset(stream), 'reset');
  assert.ok(names.includes(generate(stream, 'Again:').text));
}

// JSON schema.
ok(api.clearTrie(stream), 'clear_token_trie');
const schema = JSON.stringify({
  type: 'object',
  properties: {
    tool: { enum: names },
    query: { type: 'string', maxLength: 12 },
  },
  required: ['tool', 'query'],
  additionalProperties: false,
});
ok(api.setSchema(stream, schema, Buffer.byteLength(schema), 1), 'set_json_schema');
ok(api.reset(stream), 'reset');
const json = generate(stream, 'Call a tool as JSON:');
assert.equal(json.stop, STOP_CONSTRAINT_COMPLETED, `schema output stopped early: ${json.text}`);
const doc = JSON.parse(json.text);
assert.ok(names.includes(doc.tool), json.text);
assert.equal(typeof doc.query, 'string');
assert.deepEqual(Object.keys(doc).sort(), ['query', 'tool']);
console.log(`schema: ${json.text}`);

api.streamClose(stream);
api.contextFree(ctx);
api.modelFree(model);
console.log('ffi_test: all checks passed');
