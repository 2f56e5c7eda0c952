// best_of_n.test.mjs — best-of-4 by fork: a prefilled root forked 4 times and reseeded, the four
// stepped in one batch, the lowest perplexity picked; each equals the same branch run alone.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PROMPT, drainBatch, smallContext } from './helpers.mjs';

const params = { maxTokens: 12, temperature: 0.9, seed: 1, trackPerplexity: true };

test('best-of-4 by fork equals each branch generated alone', async () => {
  const ctx = smallContext();
  const root = ctx.createBranch(params);
  root.prefillText(PROMPT, { addSpecial: true, parseSpecial: false });
  const kids = [0, 1, 2, 3].map((i) => {
    const k = root.fork();
    k.reseed(100 + i);
    return k;
  });
  assert.equal(ctx.store.available(), 8 - 5);
  const batched = drainBatch(ctx.store, kids);
  const ppl = kids.map((k) => k.perplexity());
  for (let i = 0; i < 4; ++i) {
    assert.equal(batched[i].length, 12);
    assert.deepEqual(kids[i].output(), batched[i]);
    assert.ok(ppl[i] > 0, `perplexity of branch ${i}: ${ppl[i]}`);
  }
  const best = ppl.indexOf(Math.min(...ppl));
  kids[best].retainOnly();
  assert.equal(ctx.store.available(), 8 - 1);
  assert.equal(root.valid(), false);

  // The same four, one at a time on a fresh context (through the async iterator).
  const other = smallContext();
  for (let i = 0; i < 4; ++i) {
    const b = other.createBranch({ ...params, seed: 100 + i });
    b.prefillText(PROMPT, { addSpecial: true, parseSpecial: false });
    const alone = [];
    let last = null;
    for await (const step of b) {
      alone.push(...step.tokens);
      last = step;
    }
    assert.equal(last.stopReason, 'max_tokens');
    assert.deepEqual(alone, batched[i], `branch ${i}`);
    b.free();
  }
});
