import { keySlot } from '../../../../src/store/redis/key-slot';

describe('keySlot', () => {
  it('gives the slots Redis Cluster gives', () => {
    // CLUSTER KEYSLOT answers, as the Redis documentation and a cluster report them.
    expect(keySlot('foo')).toBe(12182);
    expect(keySlot('somekey')).toBe(11058);
    expect(keySlot('')).toBe(0);
  });

  it('hashes only the first non-empty hash tag', () => {
    expect(keySlot('{user1000}.following')).toBe(keySlot('user1000'));
    expect(keySlot('{user1000}.followers')).toBe(keySlot('user1000'));
    // An empty tag is no tag: the whole key counts.
    expect(keySlot('{}.x')).not.toBe(keySlot(''));
    expect(keySlot('foo{}{bar}')).toBe(keySlot('foo{}{bar}'));
    expect(keySlot('foo{{bar}}zap')).toBe(keySlot('{bar'));
  });

  it('hashes the UTF-8 bytes of other characters', () => {
    expect(keySlot('{é}:1')).toBe(keySlot('é'));
    expect(keySlot('é')).not.toBe(keySlot('e'));
    expect(keySlot('日本')).toBe(keySlot('{日本}:x'));
  });

  it('is not confused by what a longer key left behind', () => {
    const before = keySlot('x');
    keySlot('a'.repeat(5_000) + '{tag}');
    keySlot('b'.repeat(100) + '}' + 'c'.repeat(100));
    expect(keySlot('x')).toBe(before);
    expect(keySlot('{x')).toBe(keySlot('{x'));
    expect(keySlot('{x')).not.toBe(keySlot('x'));
  });
});
