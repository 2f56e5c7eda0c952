// stop_strings.test.mjs — a branch's stop strings end its generation at the string, and bad
// lists throw.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LacunaError } from '../index.js';
import { PROMPT, drain, smallContext } from './helpers.mjs';

test('a stop string ends the generation before it', () => {
  const ctx = smallContext();
  const free = ctx.createBranch({ maxTokens: 24 });
  free.prefillText(PROMPT);
  drain(free);
  const full = free.text();
  assert.ok(full.length > 12, full);
  const stop = full.slice(8, 12);
  const cut = full.indexOf(stop);
  const b = ctx.createBranch({ maxTokens: 24 });
  b.setStopStrings([stop]);
  b.prefillText(PROMPT);
  drain(b);
  assert.equal(b.text(), full.slice(0, cut));
  assert.equal(b.stats().stopReason, 'stop_string');
  assert.throws(() => b.setStopStrings(['']), LacunaError);
  assert.throws(() => b.setStopStrings('x'), LacunaError);
  b.setStopStrings([]);
  b.prefillText(PROMPT);
  drain(b);
  assert.equal(b.stats().stopReason, 'max_tokens');
  ctx.free();
});
