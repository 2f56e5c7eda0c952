// index.d.ts — TypeScript declarations of the lacuna Node package (index.js).

/** Names of lacuna_status values other than LACUNA_OK. */
export type LacunaStatus =
  | 'LACUNA_ERR_INVALID_ARGUMENT'
  | 'LACUNA_ERR_PARSE'
  | 'LACUNA_ERR_SCHEMA'
  | 'LACUNA_ERR_MODEL_MISMATCH'
  | 'LACUNA_ERR_LIMIT'
  | 'LACUNA_ERR_NOT_FOUND'
  | 'LACUNA_ERR_STATE'
  | 'LACUNA_ERR_INTERNAL'
  | 'LACUNA_ERR_IO'
  | 'LACUNA_ERR_BUSY';

/** Why a generation ended ("none" while it runs). */
export type StopReason =
  | 'none'
  | 'eog'
  | 'constraint_completed'
  | 'constraint_dead_end'
  | 'max_tokens'
  | 'stop_string'
  | 'context_full'
  | 'cancelled';

/** A failed lacuna call: the status's name, its number, and lacuna_last_error()'s message. */
export class LacunaError extends Error {
  readonly name: 'LacunaError';
  readonly status: LacunaStatus;
  readonly code: number;
  constructor(status: LacunaStatus, message: string, code?: number);
}

/** Loads liblacuna.so once: `path`, else $LACUNA_LIB, else "liblacuna.so" from the library path. */
export function loadLibrary(path?: string): unknown;
/** LACUNA_ABI_VERSION of the loaded library. */
export function abiVersion(): number;

export type Token = number;
export type Tokens = readonly Token[] | Int32Array | Iterable<Token>;

export interface ModelOptions {
  /** Layers to offload when a GPU backend exists; default -1 (all). */
  nGpuLayers?: number;
  useMmap?: boolean;
  /** Only the tokenizer: no context can be created. */
  vocabOnly?: boolean;
  /** Path of liblacuna.so (else $LACUNA_LIB); only the first load in a process chooses. */
  lib?: string;
}

export class Model {
  constructor(path: string, options?: ModelOptions);
  static load(path: string, options?: ModelOptions): Model;
  readonly nVocab: number;
  tokenize(text: string, options?: { addSpecial?: boolean; parseSpecial?: boolean }): Token[];
  tokenBytes(token: Token, options?: { special?: boolean }): Uint8Array;
  detokenize(tokens: Tokens, options?: { special?: boolean }): string;
  createContext(options?: ContextOptions): Context;
  /** Releases the handle now (contexts made from it keep working). */
  free(): void;
}

export interface ContextOptions {
  /** KV cells shared by every branch; default 4096; 0 = the model's size. */
  nCtx?: number;
  /** Most tokens per forward pass; default 512. */
  nBatch?: number;
  /** Default 0 = all hardware threads. */
  nThreads?: number;
  /** Branches alive at once; default 8. */
  nBranches?: number;
}

export interface BranchParams {
  /** Tokens per generation; default 256; 0 = until another stop. */
  maxTokens?: number;
  /** Default 0 = greedy. */
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  seed?: number;
  /** perplexity() counts next()'s tokens too (one log-sum-exp per token). */
  trackPerplexity?: boolean;
  /** Automatic Blink KV when the context is full: keep the first blinkSinks and last blinkTail tokens. */
  blinkSinks?: number;
  blinkTail?: number;
}

export interface KvPressure {
  nCtx: number;
  /** Positions held by the branches (a fork's shared prefix once). */
  used: number;
  remaining: number;
}

export class Context {
  constructor(model: Model, options?: ContextOptions);
  readonly model: Model;
  /** The context's batched operations. */
  readonly store: BranchStore;
  /** A new empty root branch; LACUNA_ERR_LIMIT when all nBranches sequences are taken. */
  createBranch(params?: BranchParams): Branch;
  /** Releases the handle now (its branches keep the context alive). */
  free(): void;
}

/** One step of a generation: the token(s) it emitted (several when forced tokens were skipped). */
export interface Step {
  tokens: Token[];
  /** Their text; a UTF-8 character split across steps comes whole with the later step. */
  text: string;
  done: boolean;
  stopReason: StopReason;
}

export class BranchStore {
  readonly context: Context;
  /** One next() for each branch in shared forward passes; their steps in the same order. */
  step(branches: readonly Branch[]): Step[];
  /** commit(token) for each [branch, token], in one forward pass. */
  commit(items: ReadonlyArray<readonly [Branch, Token]>): void;
  /** Prunes every other branch of the context; `keep` becomes a root. */
  retainOnly(keep: Branch): void;
  /** Branch sequences still free. */
  available(): number;
  kvPressure(): KvPressure;
}

export interface GenerationStats {
  promptTokens: number;
  tokensEmitted: number;
  forwardPasses: number;
  tokensSkipped: number;
  tokensBatchFilled: number;
  draftProposed: number;
  draftAccepted: number;
  jumpTokens: number;
  prefillMs: number;
  decodeMs: number;
  maskMs: number;
  sampleMs: number;
  totalMs: number;
  stopReason: StopReason;
}

export interface SamplerParams {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  seed?: number;
}

/** One sequence of a context. Calls on a pruned branch throw LACUNA_ERR_INVALID_ARGUMENT. */
export class Branch implements AsyncIterable<Step> {
  private constructor();
  readonly context: Context;
  /** True while the branch lives (not pruned, handle not freed). */
  valid(): boolean;

  prefill(tokens: Tokens): void;
  prefillText(text: string, options?: { addSpecial?: boolean; parseSpecial?: boolean }): void;
  /** The sequence becomes exactly `tokens`, reusing the longest prefix held anywhere. */
  setTokens(tokens: Tokens): void;

  next(): Step;
  /** Runs to the end; `onStep` may return false to stop early. The stop reason. */
  generate(onStep?: (step: Step) => boolean | void): StopReason;
  /** The steps until done, yielding to the event loop between them. */
  steps(): AsyncGenerator<Step, void, undefined>;
  /** The generated text piece by piece until done. */
  textChunks(): AsyncGenerator<string, void, undefined>;
  [Symbol.asyncIterator](): AsyncGenerator<Step, void, undefined>;
  /** Samples without taking the token; null when the constraint allows none. */
  produce(): Token | null;
  commit(token: Token): void;

  fork(): Branch;
  /** LACUNA_ERR_STATE while the branch has live children. */
  prune(): void;
  pruneSubtree(): void;
  retainOnly(): void;

  setGrammar(gbnf: string, options?: { triggers?: string[] }): void;
  setJsonSchema(schema: string | object, options?: { compact?: boolean; triggers?: string[] }): void;
  setTokenTrie(payload: string | object): void;
  clearConstraint(): void;
  /** Fields left out take the defaults (temperature 0, topK 40, topP 0.95, minP 0.05, seed 0). */
  setSampler(params?: SamplerParams): void;
  reseed(seed: number): void;
  /** The generation stops once its text contains one of these; [] clears. */
  setStopStrings(strings: string[]): void;
  /** [[token, bias], ...] or a Map; empty clears. */
  setLogitBias(bias: Iterable<readonly [Token, number]>): void;

  /** Nats. */
  entropy(): number;
  /** -log p(token), nats. */
  surprisal(token: Token): number;
  perplexity(): number;
  logits(): Float32Array;

  clearAndReseed(sinks: Tokens, tail: Tokens): void;
  saveState(path: string): void;
  loadState(path: string): void;

  /** The whole sequence (KV, then pending). */
  tokens(): Token[];
  sequence(): Token[];
  /** The current generation's tokens and text. */
  output(): Token[];
  text(): string;
  stats(): GenerationStats;

  /** Releases the handle now; the branch and what was forked from it are pruned. */
  free(): void;
}
