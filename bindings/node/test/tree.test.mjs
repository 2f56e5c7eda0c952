// tree.test.mjs — a tree of forks pruned back: a parent with live children refuses, prune,
// pruneSubtree, retainOnly, free(); a pruned branch throws on use; the rest goes on. Handles
// dropped by JS are released by the garbage collector, a parent only after its forks.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { LacunaError } from '../index.js';
import { PROMPT, drain, smallContext } from './helpers.mjs';

function throwsStatus(fn, status) {
  assert.throws(fn, (e) => e instanceof LacunaError && e.status === status && e.message.length > 0);
}

test('a tree of forks pruned back', () => {
  const ctx = smallContext();
  const root = ctx.createBranch({ maxTokens: 4 });
  root.prefillText(PROMPT);
  const a = root.fork();
  const a1 = a.fork();
  const a2 = a.fork();
  const b = root.fork();
  assert.equal(ctx.store.available(), 8 - 5);
  const kv = ctx.store.kvPressure();
  assert.equal(kv.nCtx, 512);
  assert.equal(kv.used + kv.remaining, kv.nCtx);
  assert.equal(kv.used, root.tokens().length); // the forks share the root's prefix

  throwsStatus(() => root.prune(), 'LACUNA_ERR_STATE');
  throwsStatus(() => a.prune(), 'LACUNA_ERR_STATE');
  a1.prune();
  assert.equal(a1.valid(), false);
  throwsStatus(() => a1.next(), 'LACUNA_ERR_INVALID_ARGUMENT');
  throwsStatus(() => a1.fork(), 'LACUNA_ERR_INVALID_ARGUMENT');
  throwsStatus(() => a1.prune(), 'LACUNA_ERR_INVALID_ARGUMENT');
  throwsStatus(() => ctx.store.step([b, a1]), 'LACUNA_ERR_INVALID_ARGUMENT');

  a.pruneSubtree();
  assert.equal(a.valid(), false);
  assert.equal(a2.valid(), false);
  assert.equal(ctx.store.available(), 8 - 2);

  // free() releases the handle and prunes what was forked from it.
  const c = b.fork();
  const d = c.fork();
  c.free();
  assert.equal(d.valid(), false);
  throwsStatus(() => c.next(), 'LACUNA_ERR_INVALID_ARGUMENT');

  // The survivors still generate, and retainOnly leaves one root.
  const want = drain(root.fork());
  assert.deepEqual(drain(b), want);
  b.retainOnly();
  assert.equal(root.valid(), false);
  assert.equal(b.valid(), true);
  assert.equal(ctx.store.available(), 8 - 1);
  b.prefillText(' and then', { addSpecial: false });
  assert.equal(drain(b).length, 4);
});

test('dropped handles are released on GC; a fork keeps its parent alive', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  const collect = async () => {
    for (let i = 0; i < 2; ++i) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      gc();
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  };
  const ctx = smallContext({ nBranches: 3 });
  const setup = () => {
    const root = ctx.createBranch({ maxTokens: 2 });
    root.prefillText(PROMPT);
    ctx.createBranch(); // dropped at once
    return { fork: root.fork() }; // the root's object is reachable only through its fork
  };
  const held = setup();
  assert.equal(ctx.store.available(), 0);
  await collect();
  assert.equal(ctx.store.available(), 1);
  assert.equal(held.fork.valid(), true);
  assert.equal(drain(held.fork).length, 2);
  held.fork = null;
  await collect();
  assert.equal(ctx.store.available(), 3);
});
