// helpers.mjs — what the tests share: the model (LACUNA_TEST_MODEL; the library from
// LACUNA_LIB), small contexts, and draining a branch.
import { Context, Model } from '../index.js';

export const PROMPT = 'The assistant decides what to do next:';

let model = null;

export function testModel() {
  if (model === null) {
    const path = process.env.LACUNA_TEST_MODEL;
    if (!path) throw new Error('set LACUNA_TEST_MODEL to a GGUF model (e.g. build/models/tiny-llama3.gguf)');
    model = new Model(path);
  }
  return model;
}

export function smallContext(options = {}) {
  return new Context(testModel(), { nCtx: 512, nThreads: 1, ...options });
}

// Steps the branch alone until done; its tokens.
export function drain(branch) {
  const tokens = [];
  for (let i = 0; i < 1000; ++i) {
    const step = branch.next();
    tokens.push(...step.tokens);
    if (step.done) break;
  }
  return tokens;
}

// Steps all branches together (one forward pass per step) until each is done; their tokens.
export function drainBatch(store, branches) {
  const tokens = branches.map(() => []);
  for (let i = 0; i < 1000; ++i) {
    const steps = store.step(branches);
    steps.forEach((s, j) => tokens[j].push(...s.tokens));
    if (steps.every((s) => s.done)) break;
  }
  return tokens;
}
