import * as net from 'node:net';
import type { StatsdDrops, StatsdSink } from './metrics';

/**
 * Plain statsd lines over one TCP connection (USE_STATSD), holding at most `maxQueuedBytes` for an
 * agent that is slow, stopped reading or not there: lines past that are dropped and counted, never
 * queued. hot-shots' TCP transport hands every line to `socket.write` whatever the socket already
 * holds, so an agent that accepts and stops reading makes the process hold every metric line it
 * sends from then on; it exposes neither the socket's queue nor its drain.
 *
 * Lines are gathered and written every `flushIntervalMs` or once `batchBytes` are waiting; a closed
 * or refused connection is opened again after `reconnectDelayMs`, the lines waiting meanwhile
 * within the same bound. The socket never keeps the process alive.
 */

export interface TcpStatsdOptions {
  readonly host: string;
  readonly port: number;
  /** Bytes written but not yet taken by the agent, plus bytes waiting to be written (STATSD_MAX_QUEUED_BYTES). */
  readonly maxQueuedBytes: number;
  readonly flushIntervalMs?: number;
  readonly batchBytes?: number;
  readonly reconnectDelayMs?: number;
  /** Connection errors, and the first line dropped. */
  readonly onError?: (error: Error) => void;
}

/** How long close() waits for the agent to take what is queued. */
const CLOSE_GRACE_MS = 1_000;

export class TcpStatsdClient implements StatsdSink {
  private socket: net.Socket | undefined;
  private connected = false;
  private closing = false;
  private waiting: string[] = [];
  private waitingBytes = 0;
  private droppedLines = 0;
  private droppedBytes = 0;
  private readonly flushTimer: NodeJS.Timeout;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly batchBytes: number;
  private readonly reconnectDelayMs: number;

  constructor(private readonly options: TcpStatsdOptions) {
    this.batchBytes = options.batchBytes ?? 8 * 1024;
    this.reconnectDelayMs = options.reconnectDelayMs ?? 1_000;
    this.flushTimer = setInterval(() => this.flush(), options.flushIntervalMs ?? 1_000);
    this.flushTimer.unref();
    this.connect();
  }

  increment(stat: string, value: number): void {
    this.add(`${stat}:${value}|c\n`);
  }

  timing(stat: string, milliseconds: number): void {
    this.add(`${stat}:${milliseconds}|ms\n`);
  }

  /** Lines and bytes dropped so far. */
  drops(): StatsdDrops {
    return { lines: this.droppedLines, bytes: this.droppedBytes };
  }

  /** Bytes held for the agent: written and not yet taken, and waiting to be written. */
  queuedBytes(): number {
    return this.waitingBytes + (this.socket?.writableLength ?? 0);
  }

  /** Writes what is waiting, then ends the connection (cut after a second if the agent does not read). */
  close(callback?: (error?: Error) => void): void {
    clearInterval(this.flushTimer);
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    this.closing = true;
    this.flush();
    const socket = this.socket;
    if (socket === undefined || socket.destroyed) {
      callback?.();
      return;
    }
    const cut = setTimeout(() => socket.destroy(), CLOSE_GRACE_MS);
    cut.unref();
    socket.once('close', () => {
      clearTimeout(cut);
      callback?.();
    });
    if (this.connected) socket.end();
    else socket.destroy();
  }

  private add(line: string): void {
    // Names are ASCII in practice (request values are cut and hashed upstream); bytes, to be exact.
    const bytes = Buffer.byteLength(line);
    if (this.queuedBytes() + bytes > this.options.maxQueuedBytes) {
      if (this.droppedLines === 0)
        this.options.onError?.(new Error(`statsd agent not taking lines: dropping past STATSD_MAX_QUEUED_BYTES (${this.options.maxQueuedBytes})`));
      this.droppedLines++;
      this.droppedBytes += bytes;
      return;
    }
    this.waiting.push(line);
    this.waitingBytes += bytes;
    if (this.waitingBytes >= this.batchBytes) this.flush();
  }

  private flush(): void {
    if (!this.connected || this.waiting.length === 0) return;
    const text = this.waiting.join('');
    this.waiting = [];
    this.waitingBytes = 0;
    this.socket!.write(text);
  }

  private connect(): void {
    this.reconnectTimer = undefined;
    const socket = net.connect(this.options.port, this.options.host);
    this.socket = socket;
    socket.unref();
    socket.setNoDelay(true);
    socket.on('connect', () => {
      this.connected = true;
      this.flush();
    });
    socket.on('error', (err) => this.options.onError?.(err));
    socket.on('close', () => {
      // What the socket still held is lost with the connection.
      const lost = socket.writableLength;
      if (lost > 0) this.droppedBytes += lost;
      this.connected = false;
      if (this.closing) return;
      this.reconnectTimer = setTimeout(() => this.connect(), this.reconnectDelayMs);
      this.reconnectTimer.unref();
    });
  }
}
