// index.js — the lacuna Node package: Model, Context, Branch and BranchStore over liblacuna.so's
// C ABI (include/lacuna/lacuna.h, "branches") through koffi. Every call is synchronous on the
// calling thread; a non-OK status throws a LacunaError and leaves everything else usable.
import koffi from 'koffi';

const ABI_VERSION = 2;
const LLAMA_TOKEN_NULL = -1;

// ---- errors -------------------------------------------------------------------------------

/** A non-OK lacuna_status: `.status` is its name ("LACUNA_ERR_STATE"), `.code` its number. */
export class LacunaError extends Error {
  constructor(status, message, code = undefined) {
    super(message);
    this.name = 'LacunaError';
    this.status = status;
    this.code = code;
  }
}

function invalid(message) {
  return new LacunaError('LACUNA_ERR_INVALID_ARGUMENT', message, 1);
}

// ---- the library ----------------------------------------------------------------------------

let lib = null; // { path, api, types }

function declare(handle) {
  const types = {
    Model: koffi.opaque('lacuna_model'),
    Context: koffi.opaque('lacuna_context'),
    Branch: koffi.opaque('lacuna_branch'),
    ModelParams: koffi.struct('lacuna_model_params', {
      n_gpu_layers: 'int32_t',
      use_mmap: 'int32_t',
      vocab_only: 'int32_t',
    }),
    ContextParams: koffi.struct('lacuna_context_params', {
      n_ctx: 'uint32_t',
      n_batch: 'uint32_t',
      n_threads: 'int32_t',
      n_branches: 'uint32_t',
      backend_sampling: 'int32_t',
    }),
    BranchParams: koffi.struct('lacuna_branch_params', {
      max_tokens: 'int32_t',
      temperature: 'float',
      top_p: 'float',
      top_k: 'int32_t',
      min_p: 'float',
      seed: 'uint32_t',
      track_perplexity: 'int32_t',
      blink_sinks: 'uint32_t',
      blink_tail: 'uint32_t',
    }),
    Step: koffi.struct('lacuna_step', {
      tokens: 'void *',
      n_tokens: 'size_t',
      text: 'void *',
      text_len: 'size_t',
      done: 'int32_t',
      stop_reason: 'int32_t',
    }),
    Stats: koffi.struct('lacuna_stats', {
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
    }),
  };
  const f = (sig) => handle.func(sig);
  const B = 'lacuna_branch *branch';
  const api = {
    abiVersion: f('uint32_t lacuna_abi_version(void)'),
    lastError: f('const char *lacuna_last_error(void)'),
    statusName: f('const char *lacuna_status_name(int status)'),
    stopReasonName: f('const char *lacuna_stop_reason_name(int32_t reason)'),
    modelDefaults: f('lacuna_model_params lacuna_model_default_params(void)'),
    modelLoad: f('int lacuna_model_load(const char *path, const lacuna_model_params *params, _Out_ lacuna_model **out)'),
    modelFree: f('void lacuna_model_free(lacuna_model *model)'),
    nVocab: f('int32_t lacuna_model_n_vocab(const lacuna_model *model)'),
    tokenize: f('int lacuna_tokenize(const lacuna_model *model, const char *text, size_t len, int32_t add_special, int32_t parse_special, _Out_ int32_t *tokens, size_t capacity, _Out_ size_t *n_tokens)'),
    tokenToPiece: f('int lacuna_token_to_piece(const lacuna_model *model, int32_t token, int32_t special, _Out_ uint8_t *buf, size_t capacity, _Out_ size_t *len)'),
    contextDefaults: f('lacuna_context_params lacuna_context_default_params(void)'),
    contextCreate: f('int lacuna_context_create(lacuna_model *model, const lacuna_context_params *params, _Out_ lacuna_context **out)'),
    contextFree: f('void lacuna_context_free(lacuna_context *ctx)'),
    kvPressure: f('int lacuna_context_kv_pressure(lacuna_context *ctx, _Out_ uint32_t *n_ctx, _Out_ uint32_t *used, _Out_ uint32_t *remaining)'),
    available: f('int lacuna_context_available(lacuna_context *ctx, _Out_ size_t *n_free)'),
    branchDefaults: f('lacuna_branch_params lacuna_branch_default_params(void)'),
    branchCreate: f('int lacuna_branch_create(lacuna_context *ctx, const lacuna_branch_params *params, _Out_ lacuna_branch **out)'),
    branchFree: f('void lacuna_branch_free(lacuna_branch *branch)'),
    prefill: f(`int lacuna_branch_prefill(${B}, const int32_t *tokens, size_t n)`),
    prefillText: f(`int lacuna_branch_prefill_text(${B}, const char *text, size_t len, int32_t add_special, int32_t parse_special)`),
    setTokens: f(`int lacuna_branch_set_tokens(${B}, const int32_t *tokens, size_t n)`),
    next: f(`int lacuna_branch_next(${B}, _Out_ lacuna_step *step)`),
    produce: f(`int lacuna_branch_produce(${B}, _Out_ int32_t *token)`),
    commit: f(`int lacuna_branch_commit(${B}, int32_t token)`),
    fork: f(`int lacuna_branch_fork(${B}, _Out_ lacuna_branch **out)`),
    prune: f(`int lacuna_branch_prune(${B})`),
    pruneSubtree: f(`int lacuna_branch_prune_subtree(${B})`),
    retainOnly: f(`int lacuna_branch_retain_only(${B})`),
    alive: f('int32_t lacuna_branch_alive(const lacuna_branch *branch)'),
    setGrammar: f(`int lacuna_branch_set_grammar(${B}, const char *gbnf, size_t len, const char **triggers, size_t n_triggers)`),
    setJsonSchema: f(`int lacuna_branch_set_json_schema(${B}, const char *schema, size_t len, int32_t compact, const char **triggers, size_t n_triggers)`),
    setTokenTrie: f(`int lacuna_branch_set_token_trie(${B}, const char *json, size_t len)`),
    clearConstraint: f(`int lacuna_branch_clear_constraint(${B})`),
    setSampler: f(`int lacuna_branch_set_sampler(${B}, float temperature, int32_t top_k, float top_p, float min_p, uint32_t seed)`),
    reseed: f(`int lacuna_branch_reseed(${B}, uint32_t seed)`),
    setLogitBias: f(`int lacuna_branch_set_logit_bias(${B}, const int32_t *tokens, const float *bias, size_t n)`),
    setStopStrings: f(`int lacuna_branch_set_stop_strings(${B}, const char **strings, size_t n)`),
    entropy: f(`int lacuna_branch_entropy(${B}, _Out_ double *nats)`),
    surprisal: f(`int lacuna_branch_surprisal(${B}, int32_t token, _Out_ double *nats)`),
    perplexity: f(`int lacuna_branch_perplexity(${B}, _Out_ double *perplexity)`),
    logits: f(`int lacuna_branch_logits(${B}, _Out_ float *buf, size_t capacity, _Out_ size_t *n)`),
    sequence: f(`int lacuna_branch_sequence(${B}, _Out_ void **tokens, _Out_ size_t *n)`),
    text: f(`int lacuna_branch_text(${B}, _Out_ void **text, _Out_ size_t *len)`),
    output: f(`int lacuna_branch_output(${B}, _Out_ void **tokens, _Out_ size_t *n)`),
    stats: f(`int lacuna_branch_stats(${B}, _Out_ lacuna_stats *stats)`),
    clearAndReseed: f(`int lacuna_branch_clear_and_reseed(${B}, const int32_t *sinks, size_t n_sinks, const int32_t *tail, size_t n_tail)`),
    saveState: f(`int lacuna_branch_save_state(${B}, const char *path)`),
    loadState: f(`int lacuna_branch_load_state(${B}, const char *path)`),
    branchesCommit: f('int lacuna_branches_commit(lacuna_branch **branches, const int32_t *tokens, size_t n)'),
    branchesStep: f('int lacuna_branches_step(lacuna_branch **branches, size_t n, void *steps)'),
  };
  return { api, types };
}

/**
 * Loads liblacuna.so once per process: `path`, else $LACUNA_LIB, else "liblacuna.so" from the
 * system's library path. Later calls return the same library (another path throws).
 */
export function loadLibrary(path = undefined) {
  const want = path ?? process.env.LACUNA_LIB ?? 'liblacuna.so';
  if (lib !== null) {
    if (path !== undefined && path !== lib.path) {
      throw new Error(`lacuna: ${lib.path} is already loaded; cannot load ${path} as well`);
    }
    return lib;
  }
  const handle = koffi.load(want);
  const { api, types } = declare(handle);
  const version = api.abiVersion();
  if (version !== ABI_VERSION) {
    throw new Error(`lacuna: ${want} has ABI version ${version}; this package needs ${ABI_VERSION}`);
  }
  const stepSize = koffi.sizeof(types.Step);
  lib = { path: want, api, types, stepSize, stopNames: new Map() };
  return lib;
}

/** LACUNA_ABI_VERSION of the loaded library. */
export function abiVersion() {
  return loadLibrary().api.abiVersion();
}

function check(status) {
  if (status === 0) return;
  // The message first: it is the last failing call's until the next lacuna call.
  const message = lib.api.lastError();
  throw new LacunaError(lib.api.statusName(status), message, status);
}

function stopName(reason) {
  let name = lib.stopNames.get(reason);
  if (name === undefined) {
    name = lib.api.stopReasonName(reason);
    lib.stopNames.set(reason, name);
  }
  return name;
}

// ---- conversions -----------------------------------------------------------------------------

function isToken(t) {
  return Number.isInteger(t) && t >= -2147483648 && t <= 2147483647;
}

function tokenOf(t, what = 'token') {
  if (!isToken(t)) throw invalid(`${what} ${String(t)} is not an int32 token id`);
  return t;
}

function tokensOf(tokens, what = 'tokens') {
  if (tokens instanceof Int32Array) return tokens;
  if (tokens == null || typeof tokens[Symbol.iterator] !== 'function') {
    throw invalid(`${what} is not an array of token ids`);
  }
  const arr = Array.from(tokens);
  const out = new Int32Array(arr.length);
  for (let i = 0; i < arr.length; ++i) out[i] = tokenOf(arr[i], `${what}[${i}]`);
  return out;
}

function stringsOf(list, what) {
  if (list == null) return [];
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string')) {
    throw invalid(`${what} is not an array of strings`);
  }
  return list;
}

function jsonText(value, what) {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object') return JSON.stringify(value);
  throw invalid(`${what} is neither a string nor an object`);
}

function int32Array(ptr, n) {
  n = Number(n);
  return n === 0 ? [] : Array.from(koffi.decode(ptr, 'int32_t', n));
}

function bytesAt(ptr, n) {
  n = Number(n);
  return n === 0 ? new Uint8Array(0) : new Uint8Array(koffi.view(ptr, n)).slice();
}

const utf8 = new TextDecoder('utf-8');

// Where a byte string stops being complete UTF-8: the start of a trailing, unfinished
// multi-byte character (bytes.length when the end is complete).
function completeUtf8(bytes) {
  const n = bytes.length;
  for (let back = 1; back <= 3 && back <= n; ++back) {
    const b = bytes[n - back];
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

function u64(x) {
  return typeof x === 'bigint' ? Number(x) : x;
}

// Handles are released when their JS object is collected, or earlier by free().
const finalizer = new FinalizationRegistry(({ release, ptr }) => release(ptr));

// ---- Model ------------------------------------------------------------------------------------

/** A loaded GGUF model (immutable; contexts keep its weights alive). */
export class Model {
  #ptr;
  #nVocab;

  /**
   * @param {string} path GGUF file
   * @param {{nGpuLayers?: number, useMmap?: boolean, vocabOnly?: boolean, lib?: string}} [options]
   */
  constructor(path, options = {}) {
    const { api } = loadLibrary(options.lib);
    if (typeof path !== 'string') throw invalid('path is not a string');
    const p = api.modelDefaults();
    if (options.nGpuLayers !== undefined) p.n_gpu_layers = options.nGpuLayers;
    if (options.useMmap !== undefined) p.use_mmap = options.useMmap ? 1 : 0;
    if (options.vocabOnly !== undefined) p.vocab_only = options.vocabOnly ? 1 : 0;
    const out = [null];
    check(api.modelLoad(path, p, out));
    this.#ptr = out[0];
    this.#nVocab = api.nVocab(this.#ptr);
    finalizer.register(this, { release: api.modelFree, ptr: this.#ptr }, this);
  }

  /** Same as `new Model(path, options)`. */
  static load(path, options = {}) {
    return new Model(path, options);
  }

  /** @internal */
  get ptr() {
    if (this.#ptr === null) throw invalid('the model was freed');
    return this.#ptr;
  }

  get nVocab() {
    return this.#nVocab;
  }

  /** Text to token ids (addSpecial: BOS as the vocabulary asks; parseSpecial: "<|eot_id|>" etc.). */
  tokenize(text, { addSpecial = true, parseSpecial = false } = {}) {
    if (typeof text !== 'string') throw invalid('text is not a string');
    const bytes = Buffer.byteLength(text);
    let tokens = new Int32Array(bytes + 8);
    const n = [0];
    let st = lib.api.tokenize(this.ptr, text, bytes, addSpecial ? 1 : 0, parseSpecial ? 1 : 0,
      tokens, tokens.length, n);
    if (st === 5 /* LIMIT */ && Number(n[0]) > tokens.length) {
      tokens = new Int32Array(Number(n[0]));
      st = lib.api.tokenize(this.ptr, text, bytes, addSpecial ? 1 : 0, parseSpecial ? 1 : 0,
        tokens, tokens.length, n);
    }
    check(st);
    return Array.from(tokens.subarray(0, Number(n[0])));
  }

  /** The bytes of one token. */
  tokenBytes(token, { special = true } = {}) {
    let buf = new Uint8Array(64);
    const len = [0];
    let st = lib.api.tokenToPiece(this.ptr, tokenOf(token), special ? 1 : 0, buf, buf.length, len);
    if (st === 5 /* LIMIT */) {
      buf = new Uint8Array(Number(len[0]) + 1);
      st = lib.api.tokenToPiece(this.ptr, token, special ? 1 : 0, buf, buf.length, len);
    }
    check(st);
    return buf.slice(0, Number(len[0]));
  }

  /** Token ids back to text (special tokens rendered unless `special` is false). */
  detokenize(tokens, { special = true } = {}) {
    const parts = Array.from(tokensOf(tokens), (t) => this.tokenBytes(t, { special }));
    return utf8.decode(Buffer.concat(parts));
  }

  /** A new context over this model. */
  createContext(options = {}) {
    return new Context(this, options);
  }

  /** Releases the model handle now (contexts made from it keep working). */
  free() {
    if (this.#ptr === null) return;
    finalizer.unregister(this);
    lib.api.modelFree(this.#ptr);
    this.#ptr = null;
  }
}

// ---- Context and BranchStore --------------------------------------------------------------

/** One llama.cpp context: n_ctx KV cells shared by up to nBranches branches. One thread. */
export class Context {
  #ptr;
  #model;
  #store;

  /**
   * @param {Model} model
   * @param {{nCtx?: number, nBatch?: number, nThreads?: number, nBranches?: number}} [options]
   */
  constructor(model, options = {}) {
    if (!(model instanceof Model)) throw new TypeError('model is not a lacuna Model');
    const p = lib.api.contextDefaults();
    if (options.nCtx !== undefined) p.n_ctx = options.nCtx;
    if (options.nBatch !== undefined) p.n_batch = options.nBatch;
    if (options.nThreads !== undefined) p.n_threads = options.nThreads;
    if (options.nBranches !== undefined) p.n_branches = options.nBranches;
    const out = [null];
    check(lib.api.contextCreate(model.ptr, p, out));
    this.#ptr = out[0];
    this.#model = model;
    this.#store = new BranchStore(this);
    finalizer.register(this, { release: lib.api.contextFree, ptr: this.#ptr }, this);
  }

  /** @internal */
  get ptr() {
    if (this.#ptr === null) throw invalid('the context was freed');
    return this.#ptr;
  }

  get model() {
    return this.#model;
  }

  /** The context's batched operations. */
  get store() {
    return this.#store;
  }

  /** A new empty root branch (LACUNA_ERR_LIMIT when all nBranches sequences are taken). */
  createBranch(params = {}) {
    const p = lib.api.branchDefaults();
    const fields = {
      maxTokens: 'max_tokens', temperature: 'temperature', topP: 'top_p', topK: 'top_k',
      minP: 'min_p', seed: 'seed', blinkSinks: 'blink_sinks', blinkTail: 'blink_tail',
    };
    for (const [js, c] of Object.entries(fields)) {
      if (params[js] === undefined) continue;
      if (typeof params[js] !== 'number') throw invalid(`${js} is not a number`);
      p[c] = params[js];
    }
    if (params.trackPerplexity !== undefined) p.track_perplexity = params.trackPerplexity ? 1 : 0;
    const out = [null];
    check(lib.api.branchCreate(this.ptr, p, out));
    return new Branch(this, out[0], null);
  }

  /** Releases the context handle now (its branches keep it alive until they are freed). */
  free() {
    if (this.#ptr === null) return;
    finalizer.unregister(this);
    lib.api.contextFree(this.#ptr);
    this.#ptr = null;
  }
}

/** Many branches of one context in one forward pass. */
export class BranchStore {
  #ctx;

  constructor(ctx) {
    this.#ctx = ctx;
  }

  get context() {
    return this.#ctx;
  }

  /** One next() for each branch, all in shared forward passes; the steps in the same order. */
  step(branches) {
    const ptrs = batchOf(branches, 'branches');
    const buf = Buffer.alloc(ptrs.length * lib.stepSize);
    check(lib.api.branchesStep(ptrs, ptrs.length, buf));
    return branches.map((b, i) => b._takeStep(koffi.decode(buf, i * lib.stepSize, lib.types.Step)));
  }

  /** commit() for each [branch, token] pair, in one forward pass. */
  commit(items) {
    if (!Array.isArray(items) || items.some((it) => !Array.isArray(it) || it.length !== 2)) {
      throw new TypeError('items is not an array of [branch, token] pairs');
    }
    const ptrs = batchOf(items.map((it) => it[0]), 'items');
    const tokens = tokensOf(items.map((it) => it[1]), 'tokens');
    check(lib.api.branchesCommit(ptrs, tokens, ptrs.length));
  }

  /** Prunes every other branch of the context; `keep` becomes a root. */
  retainOnly(keep) {
    if (!(keep instanceof Branch)) throw new TypeError('keep is not a lacuna Branch');
    keep.retainOnly();
  }

  /** Branch sequences still free. */
  available() {
    const n = [0];
    check(lib.api.available(this.#ctx.ptr, n));
    return Number(n[0]);
  }

  /** KV cells: the context's size, those held by branches (a shared prefix once), the rest. */
  kvPressure() {
    const nCtx = [0];
    const used = [0];
    const remaining = [0];
    check(lib.api.kvPressure(this.#ctx.ptr, nCtx, used, remaining));
    return { nCtx: nCtx[0], used: used[0], remaining: remaining[0] };
  }
}

function batchOf(branches, what) {
  if (!Array.isArray(branches) || branches.some((b) => !(b instanceof Branch))) {
    throw new TypeError(`${what} is not an array of lacuna Branches`);
  }
  if (branches.length === 0) throw invalid(`${what} is empty`);
  return branches.map((b) => b.ptr);
}

// ---- Branch -------------------------------------------------------------------------------------

/**
 * One sequence of a context: prefill, generate (pull-based, or `for await` over its steps),
 * produce/commit, fork, prune, metrics, Blink KV, state files.
 */
export class Branch {
  #ptr;
  #ctx;
  #parent; // keeps the parent's handle (whose release prunes its subtree) alive
  #carry = new Uint8Array(0); // the unfinished UTF-8 character at the end of the last step

  /** @internal Use Context.createBranch or Branch.fork. */
  constructor(ctx, ptr, parent) {
    this.#ctx = ctx;
    this.#ptr = ptr;
    this.#parent = parent;
    finalizer.register(this, { release: lib.api.branchFree, ptr }, this);
  }

  /** @internal */
  get ptr() {
    if (this.#ptr === null) throw invalid('the branch handle was freed');
    return this.#ptr;
  }

  get context() {
    return this.#ctx;
  }

  /** True while the branch lives (not pruned, handle not freed). */
  valid() {
    return this.#ptr !== null && lib.api.alive(this.#ptr) === 1;
  }

  // ---- tokens in ----

  prefill(tokens) {
    const t = tokensOf(tokens);
    check(lib.api.prefill(this.ptr, t, t.length));
    this.#carry = new Uint8Array(0);
  }

  prefillText(text, { addSpecial = true, parseSpecial = true } = {}) {
    if (typeof text !== 'string') throw invalid('text is not a string');
    check(lib.api.prefillText(this.ptr, text, Buffer.byteLength(text), addSpecial ? 1 : 0,
      parseSpecial ? 1 : 0));
    this.#carry = new Uint8Array(0);
  }

  setTokens(tokens) {
    const t = tokensOf(tokens);
    check(lib.api.setTokens(this.ptr, t, t.length));
    this.#carry = new Uint8Array(0);
  }

  // ---- generation ----

  /** The next token(s) (forced tokens skipped): one step of the generation. */
  next() {
    const step = {};
    check(lib.api.next(this.ptr, step));
    return this._takeStep(step);
  }

  /** @internal A C lacuna_step to a JS step (copied; text decoded across steps). */
  _takeStep(step) {
    const tokens = int32Array(step.tokens, step.n_tokens);
    const fresh = bytesAt(step.text, step.text_len);
    let bytes = fresh;
    if (this.#carry.length > 0) {
      bytes = new Uint8Array(this.#carry.length + fresh.length);
      bytes.set(this.#carry);
      bytes.set(fresh, this.#carry.length);
    }
    const done = step.done !== 0;
    const cut = done ? bytes.length : completeUtf8(bytes);
    this.#carry = bytes.slice(cut);
    return {
      tokens,
      text: utf8.decode(bytes.subarray(0, cut)),
      done,
      stopReason: stopName(step.stop_reason),
    };
  }

  /** Runs the generation to its end; `onStep` may return false to stop early. */
  generate(onStep = undefined) {
    for (;;) {
      const step = this.next();
      if (onStep !== undefined && onStep(step) === false) return step.stopReason;
      if (step.done) return step.stopReason;
    }
  }

  /** The steps until done, yielding to the event loop between them. */
  async *steps() {
    for (;;) {
      const step = this.next();
      yield step;
      if (step.done) return;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** The generated text, piece by piece (whole UTF-8 characters), until done. */
  async *textChunks() {
    for await (const step of this.steps()) {
      if (step.text.length > 0) yield step.text;
    }
  }

  [Symbol.asyncIterator]() {
    return this.steps();
  }

  /** Samples at the current position without taking the token (null: the constraint allows none). */
  produce() {
    const t = [0];
    check(lib.api.produce(this.ptr, t));
    return t[0] === LLAMA_TOKEN_NULL ? null : t[0];
  }

  /** Takes `token` (the constraint must allow it) and decodes it. */
  commit(token) {
    check(lib.api.commit(this.ptr, tokenOf(token)));
  }

  // ---- tree ----

  /** A new branch sharing this one's KV, constraint, sampler state and logits. */
  fork() {
    const out = [null];
    check(lib.api.fork(this.ptr, out));
    const child = new Branch(this.#ctx, out[0], this);
    child.#carry = this.#carry.slice();
    return child;
  }

  /** Frees the branch's sequence (LACUNA_ERR_STATE while it has live children). */
  prune() {
    check(lib.api.prune(this.ptr));
  }

  pruneSubtree() {
    check(lib.api.pruneSubtree(this.ptr));
  }

  /** Prunes every other branch of the context; this one becomes a root. */
  retainOnly() {
    check(lib.api.retainOnly(this.ptr));
    this.#parent = null;
  }

  // ---- constraint and sampling ----

  setGrammar(gbnf, { triggers = [] } = {}) {
    if (typeof gbnf !== 'string') throw invalid('gbnf is not a string');
    const tr = stringsOf(triggers, 'triggers');
    check(lib.api.setGrammar(this.ptr, gbnf, Buffer.byteLength(gbnf), tr.length ? tr : null,
      tr.length));
  }

  /** A JSON Schema (text or object); compact: no whitespace in the JSON. */
  setJsonSchema(schema, { compact = false, triggers = [] } = {}) {
    const text = jsonText(schema, 'schema');
    const tr = stringsOf(triggers, 'triggers');
    check(lib.api.setJsonSchema(this.ptr, text, Buffer.byteLength(text), compact ? 1 : 0,
      tr.length ? tr : null, tr.length));
  }

  /** A token-trie payload (text or object, see docs/token_trie.md). */
  setTokenTrie(payload) {
    const text = jsonText(payload, 'payload');
    check(lib.api.setTokenTrie(this.ptr, text, Buffer.byteLength(text)));
  }

  clearConstraint() {
    check(lib.api.clearConstraint(this.ptr));
  }

  setSampler({ temperature = 0, topK = 40, topP = 0.95, minP = 0.05, seed = 0 } = {}) {
    check(lib.api.setSampler(this.ptr, temperature, topK, topP, minP, seed));
  }

  reseed(seed) {
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
      throw invalid(`seed ${String(seed)} is not a uint32`);
    }
    check(lib.api.reseed(this.ptr, seed));
  }

  /** The generation stops once its text contains one of these strings; [] clears. */
  setStopStrings(strings) {
    const list = stringsOf(strings, 'stop strings');
    check(lib.api.setStopStrings(this.ptr, list.length ? list : null, list.length));
  }

  /** Adds bias to tokens' logits before sampling: [[token, bias], ...] or a Map; empty clears. */
  setLogitBias(bias) {
    if (bias == null || typeof bias[Symbol.iterator] !== 'function') {
      throw invalid('bias is not an iterable of [token, bias] pairs');
    }
    const pairs = Array.from(bias);
    const tokens = new Int32Array(pairs.length);
    const values = new Float32Array(pairs.length);
    pairs.forEach((pair, i) => {
      if (!Array.isArray(pair) || typeof pair[1] !== 'number') {
        throw invalid(`bias[${i}] is not a [token, bias] pair`);
      }
      tokens[i] = tokenOf(pair[0], `bias[${i}][0]`);
      values[i] = pair[1];
    });
    check(lib.api.setLogitBias(this.ptr, tokens, values, pairs.length));
  }

  // ---- metrics ----

  /** Entropy of the model's next-token distribution, nats. */
  entropy() {
    const v = [0];
    check(lib.api.entropy(this.ptr, v));
    return v[0];
  }

  /** -log p(token) at the current position, nats. */
  surprisal(token) {
    const v = [0];
    check(lib.api.surprisal(this.ptr, tokenOf(token), v));
    return v[0];
  }

  /** exp(mean surprisal) of the tokens taken from logits so far; 0 when none. */
  perplexity() {
    const v = [0];
    check(lib.api.perplexity(this.ptr, v));
    return v[0];
  }

  /** A copy of the logits at the current position (n_vocab floats). */
  logits() {
    const buf = new Float32Array(this.#ctx.model.nVocab);
    const n = [0];
    check(lib.api.logits(this.ptr, buf, buf.length, n));
    return buf;
  }

  // ---- Blink KV and state ----

  /** The sequence becomes sinks + tail at positions 0..; the generation goes on. */
  clearAndReseed(sinks, tail) {
    const s = tokensOf(sinks, 'sinks');
    const t = tokensOf(tail, 'tail');
    check(lib.api.clearAndReseed(this.ptr, s, s.length, t, t.length));
  }

  saveState(path) {
    if (typeof path !== 'string') throw invalid('path is not a string');
    check(lib.api.saveState(this.ptr, path));
  }

  loadState(path) {
    if (typeof path !== 'string') throw invalid('path is not a string');
    check(lib.api.loadState(this.ptr, path));
    this.#carry = new Uint8Array(0);
  }

  // ---- what it holds ----

  /** The whole sequence (KV, then pending tokens). */
  tokens() {
    const p = [null];
    const n = [0];
    check(lib.api.sequence(this.ptr, p, n));
    return int32Array(p[0], n[0]);
  }

  /** Same as tokens() (the C ABI's name). */
  sequence() {
    return this.tokens();
  }

  /** The current generation's tokens. */
  output() {
    const p = [null];
    const n = [0];
    check(lib.api.output(this.ptr, p, n));
    return int32Array(p[0], n[0]);
  }

  /** The current generation's text. */
  text() {
    const p = [null];
    const n = [0];
    check(lib.api.text(this.ptr, p, n));
    return utf8.decode(bytesAt(p[0], n[0]));
  }

  /** Stats of the current (or last) generation. */
  stats() {
    const s = {};
    check(lib.api.stats(this.ptr, s));
    return {
      promptTokens: u64(s.prompt_tokens),
      tokensEmitted: u64(s.tokens_emitted),
      forwardPasses: u64(s.forward_passes),
      tokensSkipped: u64(s.tokens_skipped),
      tokensBatchFilled: u64(s.tokens_batch_filled),
      draftProposed: u64(s.draft_proposed),
      draftAccepted: u64(s.draft_accepted),
      jumpTokens: u64(s.jump_tokens),
      prefillMs: s.prefill_ms,
      decodeMs: s.decode_ms,
      maskMs: s.mask_ms,
      sampleMs: s.sample_ms,
      totalMs: s.total_ms,
      stopReason: stopName(s.stop_reason),
    };
  }

  /**
   * Releases the handle now: the branch and everything forked from it are pruned (if alive).
   * Without it the handle is released when the object is garbage-collected.
   */
  free() {
    if (this.#ptr === null) return;
    finalizer.unregister(this);
    lib.api.branchFree(this.#ptr);
    this.#ptr = null;
    this.#parent = null;
  }
}

if (typeof Symbol.dispose === 'symbol') {
  for (const cls of [Model, Context, Branch]) {
    cls.prototype[Symbol.dispose] = function dispose() {
      this.free();
    };
  }
}
