// batch.test.mjs — BranchStore: 8 branches stepped in one batch give each the tokens it gets
// alone; produce + a batched commit gives the tokens of next().
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { drain, drainBatch, smallContext } from './helpers.mjs';

const prompts = [
  'Plan the trip:', 'List three tools:', 'The weather today', 'Call the API with',
  'Once upon a time', 'Summarize the file:', 'def main():', 'The answer is',
];
const paramsOf = (i) => ({ maxTokens: 6 + (i % 3), temperature: i % 2 ? 0.8 : 0, seed: 7 * i });

test('8 branches stepped in one batch equal each branch alone', () => {
  const ctx = smallContext();
  const branches = prompts.map((p, i) => {
    const b = ctx.createBranch(paramsOf(i));
    b.prefillText(p);
    return b;
  });
  assert.equal(ctx.store.available(), 0);
  const batched = drainBatch(ctx.store, branches);

  const other = smallContext();
  prompts.forEach((p, i) => {
    const b = other.createBranch(paramsOf(i));
    b.prefillText(p);
    assert.deepEqual(drain(b), batched[i], `branch ${i}: ${p}`);
    assert.equal(b.text(), branches[i].text());
    b.free();
  });
});

test('produce + batched commit equals next()', () => {
  const ctx = smallContext();
  const [a, b] = [ctx.createBranch({ maxTokens: 0 }), ctx.createBranch({ maxTokens: 0 })];
  a.prefillText(prompts[0]);
  b.prefillText(prompts[1]);
  const taken = [[], []];
  for (let i = 0; i < 5; ++i) {
    const ta = a.produce();
    const tb = b.produce();
    assert.ok(a.surprisal(ta) >= 0);
    ctx.store.commit([[a, ta], [b, tb]]);
    taken[0].push(ta);
    taken[1].push(tb);
  }
  assert.ok(a.perplexity() > 0);
  assert.equal(a.logits().length, ctx.model.nVocab);

  const other = smallContext();
  [0, 1].forEach((i) => {
    const c = other.createBranch({ maxTokens: 5 });
    c.prefillText(prompts[i]);
    assert.deepEqual(drain(c), taken[i]);
    c.free();
  });
});
