// state.test.mjs — setTokens, state files, Blink KV reseed, logit bias, tokenize/detokenize.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { PROMPT, drain, smallContext, testModel } from './helpers.mjs';

test('setTokens, saveState/loadState, clearAndReseed, logit bias', () => {
  const model = testModel();
  const prompt = model.tokenize(PROMPT);
  assert.equal(model.detokenize(prompt, { special: false }), PROMPT);
  const ctx = smallContext();
  const a = ctx.createBranch({ maxTokens: 5 });
  a.setTokens(prompt);
  assert.deepEqual(a.tokens(), prompt);

  const dir = mkdtempSync(join(tmpdir(), 'lacuna-node-'));
  try {
    const path = join(dir, 'a.lkv');
    a.saveState(path);
    const want = drain(a);
    const b = ctx.createBranch({ maxTokens: 5 });
    b.loadState(path);
    assert.deepEqual(drain(b), want);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }

  a.clearAndReseed(prompt.slice(0, 2), prompt.slice(-3));
  assert.deepEqual(a.tokens(), [...prompt.slice(0, 2), ...prompt.slice(-3)]);

  const c = ctx.createBranch({ maxTokens: 3 });
  c.prefill(prompt);
  assert.ok(c.entropy() > 0);
  const top = c.produce();
  c.setLogitBias([[top, -1e9]]);
  assert.notEqual(c.produce(), top);
  c.setLogitBias([]);
  assert.equal(c.produce(), top);
});
