import { createHash } from 'node:crypto';
import { Command } from 'ioredis';
import { keySlot } from '../../../../src/store/redis/key-slot';
import { BODY_HEADROOM, PreparedScript, respArgument } from '../../../../src/store/redis/script-command';

/** What ioredis itself writes for `name args...` (its Command's own encoding). */
function ioredisWire(name: string, args: (string | number)[]): string {
  return new Command(name, args).toWritable({} as never) as string;
}

/** A call's body: the free headroom, then `text`. */
function bodyOf(text: string): Buffer {
  return Buffer.concat([Buffer.alloc(BODY_HEADROOM), Buffer.from(text)]);
}

/** What a command writes on `socket`, as text. */
function wire(command: Command, socket: object): string {
  return command.toWritable(socket as never).toString();
}

/** Captures the commands a PreparedScript sends, answering each with `reply` (or failing with it). */
class Capture {
  readonly sent: Command[] = [];
  constructor(private readonly reply: (n: number) => string | Error) {}
  sendCommand(command: Command): unknown {
    this.sent.push(command);
    const r = this.reply(this.sent.length);
    if (r instanceof Error) command.reject(r);
    else command.resolve(r);
    return command.promise;
  }
}

const LUA = "return #KEYS .. ':' .. #ARGV";
const SHA = createHash('sha1').update(LUA).digest('hex');
// A key and arguments of several UTF-8 byte lengths per character.
const KEYS = ['rl:{bench_client_c1}', 'rl:{t_ünïcødé_値}'];
const ARGV = ['0', '2', 'sw:1000:5:1:1', 'fw:60000:10:0:3:d'];

describe('a prepared script call', () => {
  it('writes EVAL with the script on a connection first, EVALSHA with its hash after, byte for byte as ioredis would', async () => {
    const capture = new Capture(() => 'ok');
    const script = new PreparedScript(capture, LUA);
    const body = bodyOf([...KEYS, ...ARGV].map(respArgument).join(''));
    const socket = {};
    await script.call(KEYS.length, ARGV.length, KEYS[0], body);
    await script.call(KEYS.length, ARGV.length, KEYS[0], body);
    const [first, second] = capture.sent.map((c) => wire(c, socket));
    // toWritable runs when ioredis writes: the first write on `socket` carries the script.
    expect(first).toBe(ioredisWire('eval', [LUA, KEYS.length, ...KEYS, ...ARGV]));
    expect(second).toBe(ioredisWire('evalsha', [SHA, KEYS.length, ...KEYS, ...ARGV]));
    // Written again on the same connection (a resend after a reconnect), the same bytes.
    expect(wire(capture.sent[1], socket)).toBe(second);
    // Another connection has not seen it.
    expect(wire(capture.sent[1], {})).toBe(ioredisWire('eval', [LUA, KEYS.length, ...KEYS, ...ARGV]));
  });

  it('is routed by its first key, as ioredis routes a script call on a cluster', async () => {
    const capture = new Capture(() => 'ok');
    await new PreparedScript(capture, LUA).call(1, 0, KEYS[1], bodyOf(respArgument(KEYS[1])));
    expect(capture.sent[0].getSlot()).toBe(keySlot(KEYS[1]));
    expect(keySlot(KEYS[1])).toBe(new Command('evalsha', [SHA, 1, KEYS[1]]).getSlot());
  });

  it('resends a call answered NOSCRIPT once, in full on every connection, and passes other errors on', async () => {
    const noscript = new Capture((n) => (n === 1 ? new Error('NOSCRIPT No matching script. Please use EVAL.') : 'again'));
    const script = new PreparedScript(noscript, LUA);
    const socket = {};
    script.nameAndScript(socket); // the script was sent on this connection before
    await expect(script.call(1, 0, KEYS[0], bodyOf(respArgument(KEYS[0])))).resolves.toBe('again');
    expect(noscript.sent).toHaveLength(2);
    expect(wire(noscript.sent[1], socket)).toBe(ioredisWire('eval', [LUA, 1, KEYS[0]]));

    const failing = new Capture(() => new Error('ERR something else'));
    await expect(new PreparedScript(failing, LUA).call(1, 0, KEYS[0], bodyOf(respArgument(KEYS[0])))).rejects.toThrow('ERR something else');
    expect(failing.sent).toHaveLength(1);
  });
});
