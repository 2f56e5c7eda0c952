// json_schema.test.mjs — a JSON-Schema-constrained branch (and forks of it) gives JSON that
// parses with the required keys; the async text iterator gives the branch's whole text.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { smallContext } from './helpers.mjs';

const tools = ['search_web', 'send_email', 'read_file'];
const schema = {
  type: 'object',
  properties: {
    tool: { enum: tools },
    query: { type: 'string', maxLength: 12 },
    limit: { type: 'integer', minimum: 1, maximum: 9 },
  },
  required: ['tool', 'query', 'limit'],
  additionalProperties: false,
};

function checkDoc(text) {
  const doc = JSON.parse(text);
  assert.ok(tools.includes(doc.tool), text);
  assert.equal(typeof doc.query, 'string');
  assert.ok(Number.isInteger(doc.limit) && doc.limit >= 1 && doc.limit <= 9, text);
  assert.deepEqual(Object.keys(doc).sort(), ['limit', 'query', 'tool']);
}

test('a JSON-schema constrained branch gives JSON that parses', async () => {
  const ctx = smallContext();
  const root = ctx.createBranch({ maxTokens: 200 });
  root.setJsonSchema(schema, { compact: true });
  root.prefillText('Call a tool as JSON:');
  const kids = [1, 2].map((seed) => {
    const k = root.fork();
    k.setSampler({ temperature: 0.8, seed });
    return k;
  });

  let text = '';
  for await (const chunk of root.textChunks()) text += chunk;
  assert.equal(text, root.text());
  assert.equal(root.stats().stopReason, 'constraint_completed');
  checkDoc(text);
  assert.ok(root.stats().tokensSkipped > 0, 'forced tokens are skipped');

  ctx.store.step(kids); // one batched step, then each on its own
  for (const k of kids) {
    k.generate();
    assert.equal(k.stats().stopReason, 'constraint_completed');
    checkDoc(k.text());
  }
});
