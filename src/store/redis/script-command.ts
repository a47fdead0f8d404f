import { createHash } from 'node:crypto';
import { Command } from 'ioredis';
import { keySlot } from './key-slot';

/**
 * DECIDE's call as ioredis writes it, but encoded here: the RESP of a request's arguments is made
 * once per request (its counters' keys, its counter count and their specs) and a call's command is
 * one buffer of those blocks. ioredis's own script commands copy, flatten and measure every argument
 * of every call (a batch of 64 five-descriptor requests holds 768 arguments): that was a third of the
 * store's CPU per request; and a command joined as text from a piece per argument cost the socket
 * write a walk over hundreds of pieces.
 *
 * A ScriptCommand is an ioredis Command (queued, written, answered, resent after a reconnect and
 * redirected on a cluster by ioredis as any other) whose wire form is the bytes given. The first
 * call on each connection is an EVAL with the script's text (which caches it in Redis), the ones
 * after it EVALSHA with its hash; a call answered NOSCRIPT (a restart behind the connection, a
 * failover, SCRIPT FLUSH) is sent again, in full.
 */

/** One RESP bulk string: `$<bytes>\r\n<text>\r\n`. */
export function respArgument(text: string): string {
  return `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
}

/**
 * Bytes a call's body leaves free at its front: its command's header (argument count, EVALSHA and
 * the hash, key count: at most 80 bytes) is written there when it is sent, so the whole command is
 * that one buffer. An EVAL, with the script's text, is copied out into a buffer of its own.
 */
export const BODY_HEADROOM = 96;

/** A script's call written from prepared pieces (see the file comment). */
class ScriptCommand extends Command {
  constructor(
    private readonly script: PreparedScript,
    /** `*<arguments>\r\n` and the key count as RESP; the script's name and first argument go between. */
    private readonly count: string,
    private readonly keyCount: string,
    /** BODY_HEADROOM free bytes, then every key and argument after the key count, as RESP. */
    private readonly body: Buffer,
    private readonly routedTo: number,
  ) {
    // No arguments for ioredis to copy (the wire form is written here); replies as text.
    super('evalsha', [], { replyEncoding: 'utf8' });
  }

  /** EVAL on a connection the script was not yet sent on (which loads it there), else EVALSHA. */
  override toWritable(socket: object): Buffer {
    const head = this.count + this.script.nameAndScript(socket) + this.keyCount;
    // EVALSHA's header is ASCII, and the same bytes each time this command is written.
    if (head.length <= BODY_HEADROOM) {
      const start = BODY_HEADROOM - head.length;
      this.body.write(head, start, 'latin1');
      return this.body.subarray(start);
    }
    return Buffer.concat([Buffer.from(head), this.body.subarray(BODY_HEADROOM)]);
  }

  /** A cluster routes it by its first key, which every key of the call shares the slot of. */
  override getSlot(): number {
    return this.routedTo;
  }
}

/** What ScriptCommand needs of an ioredis client (Redis or Cluster). */
export interface CommandSender {
  sendCommand(command: Command): unknown;
}

/**
 * A Lua script called with arguments already encoded as RESP bulk strings (respArgument). `call`
 * takes the number of keys, how many arguments follow them, the first key (it routes the call on
 * a cluster), and the body: BODY_HEADROOM free bytes, then the keys and the other arguments; it
 * resolves to the script's reply.
 */
export class PreparedScript {
  private readonly evalsha: string;
  private readonly eval: string;
  /** Connections the script was sent on in full (EVAL): Redis has it cached, until a NOSCRIPT says otherwise. */
  private sentOn = new WeakSet<object>();

  constructor(
    private readonly client: CommandSender,
    lua: string,
  ) {
    this.evalsha = respArgument('evalsha') + respArgument(createHash('sha1').update(lua).digest('hex'));
    this.eval = respArgument('eval') + respArgument(lua);
  }

  call(keys: number, others: number, firstKey: string, body: Buffer): Promise<unknown> {
    const count = `*${3 + keys + others}\r\n`;
    const keyCount = respArgument(String(keys));
    const slot = keySlot(firstKey);
    return this.send(new ScriptCommand(this, count, keyCount, body, slot)).catch((err: unknown) => {
      // Sent by hash to a Redis that lost the script (a restart behind the same connection, SCRIPT
      // FLUSH, a failover): sent once more, in full on that connection.
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      this.forgetSent();
      return this.send(new ScriptCommand(this, count, keyCount, body, slot));
    });
  }

  /** The command's name and first argument on `socket`: EVAL and the script the first time, then EVALSHA and its hash. */
  nameAndScript(socket: object): string {
    if (this.sentOn.has(socket)) return this.evalsha;
    this.sentOn.add(socket);
    return this.eval;
  }

  /** After a NOSCRIPT on some connection: the next call on each is sent in full. */
  private forgetSent(): void {
    this.sentOn = new WeakSet<object>();
  }

  private send(command: ScriptCommand): Promise<unknown> {
    this.client.sendCommand(command);
    return command.promise;
  }
}
