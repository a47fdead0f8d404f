import * as net from 'node:net';
import type { H2Stream } from '../../../src/http2/connection';
import { ErrorCode, Flag, frame, FrameType, Setting, settingsFrame, wordFrame } from '../../../src/http2/frames';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { silentLogger } from '../../../src/log';
import { H2Server } from '../../../src/http2/server';
import { HealthState } from '../../../src/service/health';
import { Http2GrpcServer } from '../../../src/grpc/http2-server';
import { loadSettings } from '../../../src/settings/settings';
import { dataFrame, headersFrame, isType, RawClient, REQUEST } from '../../helpers/h2-raw-client';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * RFC 9113 and RFC 7541 conformance, one test per requirement that h2spec checks (its section
 * numbers, after RFC 7540, name each case), over a real socket with raw frames. Each asserts the
 * exact answer: a connection error is GOAWAY with its code and the socket closing; a stream error
 * is RST_STREAM with its code on that stream while the connection goes on answering PING;
 * "accepted" is the response or the PING answer that follows.
 */

type Fields = ReadonlyArray<readonly [string, string]>;
const BASE: Fields = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/echo'],
  [':authority', 'localhost'],
];
const HOLD: Fields = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/hold'],
  [':authority', 'localhost'],
];
const block = (fields: Fields): Buffer => encodeHeaderBlock(fields);
const with_ = (extra: Fields, base: Fields = BASE): Buffer => block([...base, ...extra]);
const without = (name: string): Buffer => block(BASE.filter(([n]) => n !== name));
const BODY = 'the answer, in more than one byte';
// A literal field without indexing, new name "x-test" (its value follows).
const X_TEST = Buffer.concat([Buffer.from([0x00, 0x06]), Buffer.from('x-test')]);
const END = Flag.END_HEADERS | Flag.END_STREAM;

// The field representations of RFC 7541 section 6, each in a request: ":method", ":scheme" and
// ":path" indexed, then ":authority" or a new field in the representation named. "test" in
// Huffman code is 0x49 0x50 0x9f.
const PREFIX = Buffer.from([0x83, 0x86, 0x84]);
const HUFFMAN_TEST = Buffer.from([0x83, 0x49, 0x50, 0x9f]);
const literal = (text: string): Buffer => Buffer.concat([Buffer.from([text.length]), Buffer.from(text, 'latin1')]);
const rep = (...parts: Buffer[]): Buffer => Buffer.concat([PREFIX, ...parts]);
const HPACK_REPRESENTATIONS: ReadonlyArray<readonly [string, string, Buffer]> = [
  ['generic/5/1', 'indexed fields only', Buffer.from([0x83, 0x86, 0x84, 0x81])],
  ['generic/5/2', 'incremental indexing, indexed name', rep(Buffer.from([0x41]), literal('localhost'))],
  ['generic/5/3', 'incremental indexing, indexed name, Huffman value', rep(Buffer.from([0x41]), HUFFMAN_TEST)],
  ['generic/5/4', 'incremental indexing, new name', rep(Buffer.from([0x40]), literal('x-test'), literal('test'))],
  ['generic/5/5', 'incremental indexing, new name, Huffman', rep(Buffer.from([0x40]), HUFFMAN_TEST, HUFFMAN_TEST)],
  ['generic/5/6', 'without indexing, indexed name', rep(Buffer.from([0x01]), literal('localhost'))],
  ['generic/5/7', 'without indexing, indexed name, Huffman value', rep(Buffer.from([0x01]), HUFFMAN_TEST)],
  ['generic/5/8', 'without indexing, new name', rep(Buffer.from([0x00]), literal('x-test'), literal('test'))],
  ['generic/5/9', 'without indexing, new name, Huffman', rep(Buffer.from([0x00]), HUFFMAN_TEST, HUFFMAN_TEST)],
  ['generic/5/10', 'never indexed, indexed name', rep(Buffer.from([0x11]), literal('localhost'))],
  ['generic/5/11', 'never indexed, indexed name, Huffman value', rep(Buffer.from([0x11]), HUFFMAN_TEST)],
  ['generic/5/12', 'never indexed, new name', rep(Buffer.from([0x10]), literal('x-test'), literal('test'))],
  ['generic/5/13', 'never indexed, new name, Huffman', rep(Buffer.from([0x10]), HUFFMAN_TEST, HUFFMAN_TEST)],
  ['generic/5/14', 'a table size update first', Buffer.concat([Buffer.from([0x3f, 0xe1, 0x1f]), PREFIX, Buffer.from([0x81])])],
  ['generic/5/15', 'two table size updates first', Buffer.concat([Buffer.from([0x20, 0x3f, 0xe1, 0x1f]), PREFIX, Buffer.from([0x81])])],
];

type Expectation =
  | { readonly connectionError: ErrorCode }
  | { readonly streamError: ErrorCode; readonly streamId: number }
  | { readonly response: number }
  | { readonly accepted: true }
  | { readonly goingAway: true };

interface Case {
  readonly id: string;
  readonly does: string;
  readonly settings?: ReadonlyArray<readonly [Setting, number]>;
  /** Raw bytes instead of the preface and SETTINGS. */
  readonly raw?: Buffer;
  readonly send: (client: RawClient) => void | Promise<void>;
  readonly expect: Expectation;
}

const priority = (dependency: number, weight = 15): Buffer => {
  const p = Buffer.alloc(5);
  p.writeUInt32BE(dependency, 0);
  p[4] = weight;
  return p;
};
const padded = (padLength: number, content: Buffer): Buffer => Buffer.concat([Buffer.from([padLength]), content, Buffer.alloc(Math.max(0, padLength))]);
const settingsPayload = (id: number, value: number): Buffer => {
  const p = Buffer.alloc(6);
  p.writeUInt16BE(id, 0);
  p.writeUInt32BE(value, 2);
  return p;
};
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until the server has answered stream `id` completely. */
async function answered(client: RawClient, id: number): Promise<void> {
  await client.waitFor((f) => f.streamId === id && (f.type === FrameType.HEADERS || f.type === FrameType.DATA) && (f.flags & Flag.END_STREAM) !== 0);
}

const CASES: Case[] = [
  // 3.5 connection preface
  { id: '3.5/1', does: 'a valid preface is answered with SETTINGS first', send: () => undefined, expect: { accepted: true } },
  {
    id: '3.5/2',
    does: 'an invalid preface',
    raw: Buffer.from('PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n'),
    send: () => undefined,
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 4.1 frame format
  { id: '4.1/1', does: 'a frame of unknown type is ignored', send: (c) => c.send(frame(0x16 as FrameType, 0, 0, Buffer.alloc(8))), expect: { accepted: true } },
  {
    id: '4.1/2',
    does: 'undefined flags are ignored',
    send: (c) => c.send(frame(FrameType.PING, 0x16, 0, Buffer.from('flags!!!'))),
    expect: { accepted: true },
  },
  {
    id: '4.1/3',
    does: 'the reserved bit of the stream id is ignored',
    send: (c) => {
      const f = frame(FrameType.PING, 0, 0, Buffer.from('reserved'));
      f[5] |= 0x80;
      c.send(f);
    },
    expect: { accepted: true },
  },
  // 4.2 frame size
  {
    id: '4.2/1',
    does: 'a DATA frame of 2^14 octets is accepted',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.alloc(16_384, 0x61))),
    expect: { response: 1 },
  },
  {
    id: '4.2/2',
    does: 'a DATA frame over SETTINGS_MAX_FRAME_SIZE',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.alloc(16_385))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  {
    id: '4.2/3',
    does: 'a HEADERS frame over SETTINGS_MAX_FRAME_SIZE',
    send: (c) => c.send(headersFrame(1, END, with_([['x-big', 'a'.repeat(16_400)]]))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  // 4.3 header compression
  {
    id: '4.3/1',
    does: 'an undecodable header block',
    send: (c) => c.send(headersFrame(1, END, Buffer.from([0x40, 0xff, 0xff, 0xff, 0xff, 0xff]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: '4.3/2',
    does: 'PRIORITY inside a header block',
    send: (c) => c.send(headersFrame(1, Flag.END_STREAM, REQUEST), frame(FrameType.PRIORITY, 0, 1, priority(0))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '4.3/3',
    does: 'HEADERS of another stream inside a header block',
    send: (c) => c.send(headersFrame(1, Flag.END_STREAM, REQUEST), headersFrame(3)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 5.1.1 stream identifiers
  { id: '5.1.1/1', does: 'HEADERS on an even stream id', send: (c) => c.send(headersFrame(2)), expect: { connectionError: ErrorCode.PROTOCOL_ERROR } },
  {
    id: '5.1.1/2',
    does: 'HEADERS on a stream id below one already used',
    send: (c) => c.send(headersFrame(5), headersFrame(3)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 5.1.2 stream concurrency (the server advertises 3 here)
  {
    id: '5.1.2/1',
    does: 'more streams than SETTINGS_MAX_CONCURRENT_STREAMS are refused',
    settings: [[Setting.INITIAL_WINDOW_SIZE, 0]],
    send: (c) => c.send(headersFrame(1), headersFrame(3), headersFrame(5), headersFrame(7)),
    expect: { streamError: ErrorCode.REFUSED_STREAM, streamId: 7 },
  },
  // 5.1 stream states
  { id: '5.1/1', does: 'idle: DATA', send: (c) => c.send(dataFrame(1, Buffer.from('x'))), expect: { connectionError: ErrorCode.PROTOCOL_ERROR } },
  {
    id: '5.1/2',
    does: 'idle: RST_STREAM',
    send: (c) => c.send(wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '5.1/3',
    does: 'idle: WINDOW_UPDATE',
    send: (c) => c.send(wordFrame(FrameType.WINDOW_UPDATE, 1, 100)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '5.1/4',
    does: 'idle: CONTINUATION',
    send: (c) => c.send(frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '5.1/5',
    does: 'half-closed (remote): DATA',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), dataFrame(1, Buffer.from('late'))),
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/6',
    does: 'half-closed (remote): HEADERS',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), headersFrame(1, END, block([['x-trailer', '1']]))),
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/7',
    does: 'half-closed (remote): CONTINUATION',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, block([['x-more', '1']]))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '5.1/8',
    does: 'closed by the client: DATA after its RST_STREAM',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL), dataFrame(1, Buffer.from('late'))),
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/9',
    does: 'closed by the client: HEADERS after its RST_STREAM',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL), headersFrame(1)),
    expect: { connectionError: ErrorCode.STREAM_CLOSED },
  },
  {
    id: '5.1/10',
    does: 'closed by the client: CONTINUATION after its RST_STREAM',
    send: (c) =>
      c.send(
        headersFrame(1, Flag.END_HEADERS),
        wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST),
      ),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '5.1/11',
    does: 'closed: DATA after the exchange ended',
    send: async (c) => {
      c.send(headersFrame(1));
      await answered(c, 1);
      c.send(dataFrame(1, Buffer.from('late')));
    },
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/12',
    does: 'closed: HEADERS after the exchange ended',
    send: async (c) => {
      c.send(headersFrame(1));
      await answered(c, 1);
      c.send(headersFrame(1));
    },
    expect: { connectionError: ErrorCode.STREAM_CLOSED },
  },
  {
    id: '5.1/13',
    does: 'closed: CONTINUATION after the exchange ended',
    send: async (c) => {
      c.send(headersFrame(1));
      await answered(c, 1);
      c.send(frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST));
    },
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 5.3.1 stream dependencies
  {
    id: '5.3.1/1',
    does: 'HEADERS depending on its own stream',
    send: (c) => c.send(frame(FrameType.HEADERS, END | Flag.PRIORITY, 1, Buffer.concat([priority(1), REQUEST]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '5.3.1/2',
    does: 'PRIORITY depending on its own (open) stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), frame(FrameType.PRIORITY, 0, 1, priority(1))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '5.3.1/2b',
    does: 'PRIORITY depending on its own idle stream',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 1, priority(1))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 5.4.1 connection error handling
  {
    id: '5.4.1/1+2',
    does: 'a PING on a stream: GOAWAY, then the connection closes',
    send: (c) => c.send(frame(FrameType.PING, 0, 3, Buffer.alloc(8))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 5.5 extending HTTP/2
  {
    id: '5.5/1',
    does: 'an unknown extension frame is ignored',
    send: (c) => c.send(frame(0xff as FrameType, 0, 0, Buffer.from('extension'))),
    expect: { accepted: true },
  },
  {
    id: '5.5/2',
    does: 'an unknown extension frame inside a header block',
    send: (c) => c.send(headersFrame(1, Flag.END_STREAM, REQUEST), frame(0xff as FrameType, 0, 0, Buffer.from('extension'))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 6.1 DATA
  { id: '6.1/1', does: 'DATA on stream 0', send: (c) => c.send(dataFrame(0, Buffer.from('x'))), expect: { connectionError: ErrorCode.PROTOCOL_ERROR } },
  {
    id: '6.1/2',
    does: 'DATA on a half-closed (remote) stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), dataFrame(1, Buffer.from('x'))),
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '6.1/3',
    does: 'DATA with a pad length beyond the payload',
    send: (c) =>
      c.send(headersFrame(1, Flag.END_HEADERS), frame(FrameType.DATA, Flag.PADDED | Flag.END_STREAM, 1, Buffer.from([6, 0x61, 0x62, 0x63, 0x64, 0x65]))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 6.2 HEADERS
  {
    id: '6.2/1',
    does: 'PRIORITY after HEADERS without END_HEADERS',
    send: (c) => c.send(headersFrame(1, Flag.END_STREAM, REQUEST), frame(FrameType.PRIORITY, 0, 3, priority(0))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.2/2',
    does: 'HEADERS of another stream after HEADERS without END_HEADERS',
    send: (c) => c.send(headersFrame(1, Flag.END_STREAM, REQUEST), headersFrame(3)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  { id: '6.2/3', does: 'HEADERS on stream 0', send: (c) => c.send(headersFrame(0)), expect: { connectionError: ErrorCode.PROTOCOL_ERROR } },
  {
    id: '6.2/4',
    does: 'HEADERS with a pad length beyond the payload',
    send: (c) => c.send(frame(FrameType.HEADERS, END | Flag.PADDED, 1, Buffer.concat([Buffer.from([REQUEST.length + 1]), REQUEST]))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 6.3 PRIORITY
  {
    id: '6.3/1',
    does: 'PRIORITY on stream 0',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 0, priority(1))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.3/2',
    does: 'PRIORITY of 4 octets on an open stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), frame(FrameType.PRIORITY, 0, 1, Buffer.alloc(4))),
    expect: { streamError: ErrorCode.FRAME_SIZE_ERROR, streamId: 1 },
  },
  // 6.4 RST_STREAM
  {
    id: '6.4/1',
    does: 'RST_STREAM on stream 0',
    send: (c) => c.send(wordFrame(FrameType.RST_STREAM, 0, ErrorCode.CANCEL)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.4/2',
    does: 'RST_STREAM on an idle stream',
    send: (c) => c.send(wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.4/3',
    does: 'RST_STREAM of 3 octets',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), frame(FrameType.RST_STREAM, 0, 1, Buffer.alloc(3))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  // 6.5 SETTINGS
  {
    id: '6.5/1',
    does: 'SETTINGS ACK with a payload',
    send: (c) => c.send(frame(FrameType.SETTINGS, Flag.ACK, 0, settingsPayload(Setting.ENABLE_PUSH, 0))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  {
    id: '6.5/2',
    does: 'SETTINGS on a stream',
    send: (c) => c.send(frame(FrameType.SETTINGS, 0, 1, settingsPayload(Setting.ENABLE_PUSH, 0))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.5/3',
    does: 'SETTINGS of a length not a multiple of 6',
    send: (c) => c.send(frame(FrameType.SETTINGS, 0, 0, Buffer.alloc(5))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  // 6.5.2 defined SETTINGS parameters
  {
    id: '6.5.2/1',
    does: 'SETTINGS_ENABLE_PUSH of 2',
    send: (c) => c.send(settingsFrame([[Setting.ENABLE_PUSH, 2]])),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.5.2/2',
    does: 'SETTINGS_INITIAL_WINDOW_SIZE of 2^31',
    send: (c) => c.send(settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 0x8000_0000]])),
    expect: { connectionError: ErrorCode.FLOW_CONTROL_ERROR },
  },
  {
    id: '6.5.2/3',
    does: 'SETTINGS_MAX_FRAME_SIZE below 2^14',
    send: (c) => c.send(settingsFrame([[Setting.MAX_FRAME_SIZE, 16_383]])),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.5.2/4',
    does: 'SETTINGS_MAX_FRAME_SIZE above 2^24-1',
    send: (c) => c.send(settingsFrame([[Setting.MAX_FRAME_SIZE, 0x100_0000]])),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  { id: '6.5.2/5', does: 'an unknown setting is ignored', send: (c) => c.send(settingsFrame([[0xff as Setting, 1]])), expect: { accepted: true } },
  // 6.5.3 SETTINGS synchronization
  {
    id: '6.5.3/1',
    does: 'settings apply in order: the last INITIAL_WINDOW_SIZE (1) wins',
    send: (c) =>
      c.send(
        frame(FrameType.SETTINGS, 0, 0, Buffer.concat([settingsPayload(Setting.INITIAL_WINDOW_SIZE, 100), settingsPayload(Setting.INITIAL_WINDOW_SIZE, 1)])),
        headersFrame(1),
      ),
    expect: { accepted: true },
  },
  { id: '6.5.3/2', does: 'SETTINGS is acknowledged', send: (c) => c.send(settingsFrame([])), expect: { accepted: true } },
  // 6.7 PING
  {
    id: '6.7/1',
    does: 'PING is answered with the same payload',
    send: (c) => c.send(frame(FrameType.PING, 0, 0, Buffer.from('pingpong'))),
    expect: { accepted: true },
  },
  {
    id: '6.7/2',
    does: 'a PING ACK is not answered',
    send: (c) => c.send(frame(FrameType.PING, Flag.ACK, 0, Buffer.from('unasked!'))),
    expect: { accepted: true },
  },
  {
    id: '6.7/3',
    does: 'PING on a stream',
    send: (c) => c.send(frame(FrameType.PING, 0, 1, Buffer.alloc(8))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.7/4',
    does: 'PING of 6 octets',
    send: (c) => c.send(frame(FrameType.PING, 0, 0, Buffer.alloc(6))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  // 6.8 GOAWAY
  {
    id: '6.8/1',
    does: 'GOAWAY on a stream',
    send: (c) => c.send(frame(FrameType.GOAWAY, 0, 1, Buffer.alloc(8))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 6.9 WINDOW_UPDATE
  {
    id: '6.9/1',
    does: 'WINDOW_UPDATE of 0 on the connection',
    send: (c) => c.send(wordFrame(FrameType.WINDOW_UPDATE, 0, 0)),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.9/2',
    does: 'WINDOW_UPDATE of 0 on a stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), wordFrame(FrameType.WINDOW_UPDATE, 1, 0)),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '6.9/3',
    does: 'WINDOW_UPDATE of 3 octets',
    send: (c) => c.send(frame(FrameType.WINDOW_UPDATE, 0, 0, Buffer.alloc(3))),
    expect: { connectionError: ErrorCode.FRAME_SIZE_ERROR },
  },
  // 6.9.1 the flow-control window
  {
    id: '6.9.1/1',
    does: 'with a window of 1, DATA comes 1 octet at a time',
    settings: [[Setting.INITIAL_WINDOW_SIZE, 1]],
    send: (c) => c.send(headersFrame(1)),
    expect: { accepted: true },
  },
  {
    id: '6.9.1/2',
    does: 'WINDOW_UPDATEs pushing the connection window past 2^31-1',
    send: (c) => c.send(wordFrame(FrameType.WINDOW_UPDATE, 0, 0x4000_0000), wordFrame(FrameType.WINDOW_UPDATE, 0, 0x4000_0000)),
    expect: { connectionError: ErrorCode.FLOW_CONTROL_ERROR },
  },
  {
    id: '6.9.1/3',
    does: 'WINDOW_UPDATEs pushing a stream window past 2^31-1',
    send: (c) =>
      c.send(headersFrame(1, END, block(HOLD)), wordFrame(FrameType.WINDOW_UPDATE, 1, 0x4000_0000), wordFrame(FrameType.WINDOW_UPDATE, 1, 0x4000_0000)),
    expect: { streamError: ErrorCode.FLOW_CONTROL_ERROR, streamId: 1 },
  },
  // 6.9.2 initial flow-control window size
  {
    id: '6.9.2/1',
    does: 'a new INITIAL_WINDOW_SIZE applies to open streams',
    settings: [[Setting.INITIAL_WINDOW_SIZE, 0]],
    send: async (c) => {
      c.send(headersFrame(1));
      await pause(50);
      c.send(settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 1000]]));
    },
    expect: { response: 1 },
  },
  {
    id: '6.9.2/2',
    does: 'a negative stream window is tracked',
    settings: [[Setting.INITIAL_WINDOW_SIZE, 5]],
    send: async (c) => {
      c.send(headersFrame(1));
      await c.waitFor(isType(FrameType.DATA, 1));
      c.send(settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 0]]));
      // 5 sent, window now -5: +5 brings it to 0, +BODY.length lets the rest out.
      c.send(wordFrame(FrameType.WINDOW_UPDATE, 1, 5));
      await pause(50);
      c.send(wordFrame(FrameType.WINDOW_UPDATE, 1, BODY.length));
    },
    expect: { response: 1 },
  },
  {
    id: '6.9.2/3',
    does: 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1',
    send: (c) => c.send(settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 0x8000_0000]])),
    expect: { connectionError: ErrorCode.FLOW_CONTROL_ERROR },
  },
  // 6.10 CONTINUATION
  {
    id: '6.10/1',
    does: 'a header block over HEADERS and several CONTINUATIONs',
    send: (c) =>
      c.send(
        headersFrame(1, Flag.END_STREAM, REQUEST.subarray(0, 3)),
        frame(FrameType.CONTINUATION, 0, 1, REQUEST.subarray(3, 7)),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST.subarray(7)),
      ),
    expect: { response: 1 },
  },
  {
    id: '6.10/2',
    does: 'CONTINUATION followed by DATA',
    send: (c) =>
      c.send(headersFrame(1, 0, REQUEST.subarray(0, 3)), frame(FrameType.CONTINUATION, 0, 1, REQUEST.subarray(3, 7)), dataFrame(1, Buffer.from('x'))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.10/3',
    does: 'CONTINUATION on stream 0',
    send: (c) => c.send(headersFrame(1, 0, REQUEST.subarray(0, 3)), frame(FrameType.CONTINUATION, Flag.END_HEADERS, 0, REQUEST.subarray(3))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.10/4',
    does: 'CONTINUATION after HEADERS with END_HEADERS',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, block([['x-more', '1']]))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.10/5',
    does: 'CONTINUATION after a CONTINUATION with END_HEADERS',
    send: (c) =>
      c.send(
        headersFrame(1, 0, REQUEST.subarray(0, 3)),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST.subarray(3)),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, block([['x-more', '1']])),
      ),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  {
    id: '6.10/6',
    does: 'CONTINUATION after DATA',
    send: (c) =>
      c.send(
        headersFrame(1, Flag.END_HEADERS),
        dataFrame(1, Buffer.from('x'), 0),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, block([['x-more', '1']])),
      ),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // 7 error codes
  {
    id: '7/1',
    does: 'GOAWAY with an unknown error code: nothing special',
    send: (c) => c.send(frame(FrameType.GOAWAY, 0, 0, Buffer.from([0, 0, 0, 0, 0, 0, 0, 0xff]))),
    expect: { goingAway: true },
  },
  {
    id: '7/2',
    does: 'RST_STREAM with an unknown error code: nothing special',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), wordFrame(FrameType.RST_STREAM, 1, 0xff)),
    expect: { accepted: true },
  },
  // 8.1 request/response exchange
  {
    id: '8.1/1',
    does: 'a second HEADERS without END_STREAM',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), headersFrame(1, Flag.END_HEADERS, block([['x-trailer', '1']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  // 8.1.2 header fields
  {
    id: '8.1.2/1',
    does: 'an upper-case field name',
    send: (c) => c.send(headersFrame(1, END, with_([['X-Upper', 'a']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  // 8.1.2.1 pseudo-header fields
  {
    id: '8.1.2.1/1',
    does: 'an unknown pseudo-header field',
    send: (c) => c.send(headersFrame(1, END, with_([[':unknown', 'a']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.1/2',
    does: 'a response pseudo-header field in a request',
    send: (c) => c.send(headersFrame(1, END, with_([[':status', '200']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.1/3',
    does: 'a pseudo-header field in trailers',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), headersFrame(1, END, block([[':method', 'POST']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.1/4',
    does: 'a pseudo-header field after a regular field',
    send: (c) => c.send(headersFrame(1, END, block([...BASE.slice(0, 3), ['x-regular', 'a'], BASE[3]]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  // 8.1.2.2 connection-specific header fields
  {
    id: '8.1.2.2/1',
    does: 'a connection-specific field',
    send: (c) => c.send(headersFrame(1, END, with_([['connection', 'keep-alive']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.2/2',
    does: 'TE other than "trailers"',
    send: (c) => c.send(headersFrame(1, END, with_([['te', 'trailers, deflate']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  // 8.1.2.3 request pseudo-header fields
  {
    id: '8.1.2.3/1',
    does: 'an empty :path',
    send: (c) => c.send(headersFrame(1, END, block(BASE.map(([n, v]) => [n, n === ':path' ? '' : v])))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.3/2',
    does: 'no :method',
    send: (c) => c.send(headersFrame(1, END, without(':method'))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.3/3',
    does: 'no :scheme',
    send: (c) => c.send(headersFrame(1, END, without(':scheme'))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.3/4',
    does: 'no :path',
    send: (c) => c.send(headersFrame(1, END, without(':path'))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.3/5',
    does: 'two :method',
    send: (c) => c.send(headersFrame(1, END, block([BASE[0], ...BASE]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.3/6',
    does: 'two :scheme',
    send: (c) => c.send(headersFrame(1, END, block([BASE[1], ...BASE]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.3/7',
    does: 'two :path',
    send: (c) => c.send(headersFrame(1, END, block([BASE[2], ...BASE]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  // 8.1.2.6 malformed requests
  {
    id: '8.1.2.6/1',
    does: 'content-length not the DATA length',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, with_([['content-length', '1']])), dataFrame(1, Buffer.from('test'))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.6/2',
    does: 'content-length not the sum of several DATA',
    send: (c) =>
      c.send(headersFrame(1, Flag.END_HEADERS, with_([['content-length', '9']])), dataFrame(1, Buffer.from('test'), 0), dataFrame(1, Buffer.from('test'))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  // 8.2 server push
  {
    id: '8.2/1',
    does: 'PUSH_PROMISE from a client',
    send: (c) => c.send(frame(FrameType.PUSH_PROMISE, Flag.END_HEADERS, 1, Buffer.concat([Buffer.from([0, 0, 0, 2]), REQUEST]))),
    expect: { connectionError: ErrorCode.PROTOCOL_ERROR },
  },
  // RFC 7541 (HPACK)
  {
    id: 'hpack/2.3.3/1',
    does: 'an indexed field beyond the tables',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, Buffer.from([0xff, 0x30])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: 'hpack/2.3.3/2',
    does: 'a literal field whose name index is beyond the tables',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, Buffer.from([0x0f, 0x60, 0x01, 0x61])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: 'hpack/4.2/1',
    does: 'a table size update at the end of a block',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, Buffer.from([0x3f, 0xe1, 0x1f])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  // A literal "x-test" name, then the value "test" Huffman-coded (0x49 0x50 0x9f) spoilt three ways.
  {
    id: 'hpack/5.2/1',
    does: 'Huffman padding longer than 7 bits',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, X_TEST, Buffer.from([0x84, 0x49, 0x50, 0x9f, 0xff])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: 'hpack/5.2/2',
    does: 'Huffman padding of zeros',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, X_TEST, Buffer.from([0x83, 0x49, 0x50, 0x90])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: 'hpack/5.2/3',
    does: 'a Huffman string containing EOS',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, X_TEST, Buffer.from([0x87, 0x49, 0x51, 0xff, 0xff, 0xff, 0xfa, 0x7f])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: 'hpack/6.1/1',
    does: 'an indexed field of index 0',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([REQUEST, Buffer.from([0x80])]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  {
    id: 'hpack/6.3/1',
    does: 'a table size update above SETTINGS_HEADER_TABLE_SIZE',
    send: (c) => c.send(headersFrame(1, END, Buffer.concat([Buffer.from([0x3f, 0xe2, 0x1f]), REQUEST]))),
    expect: { connectionError: ErrorCode.COMPRESSION_ERROR },
  },
  // generic: what a well-behaved client does is accepted
  {
    id: 'generic/2/1',
    does: 'PRIORITY on an idle stream, then HEADERS on a lower one',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 5, priority(0)), headersFrame(3)),
    expect: { response: 3 },
  },
  {
    id: 'generic/2/2',
    does: 'WINDOW_UPDATE on a half-closed (remote) stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), wordFrame(FrameType.WINDOW_UPDATE, 1, 100)),
    expect: { accepted: true },
  },
  {
    id: 'generic/2/3',
    does: 'PRIORITY on a half-closed (remote) stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), frame(FrameType.PRIORITY, 0, 1, priority(0))),
    expect: { accepted: true },
  },
  {
    id: 'generic/2/4',
    does: 'RST_STREAM on a half-closed (remote) stream',
    send: (c) => c.send(headersFrame(1, END, block(HOLD)), wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL)),
    expect: { accepted: true },
  },
  {
    id: 'generic/2/5',
    does: 'PRIORITY on a closed stream',
    send: async (c) => {
      c.send(headersFrame(1));
      await answered(c, 1);
      c.send(frame(FrameType.PRIORITY, 0, 1, priority(0)));
    },
    expect: { accepted: true },
  },
  {
    id: 'generic/3.1/3',
    does: 'padded DATA',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), frame(FrameType.DATA, Flag.PADDED | Flag.END_STREAM, 1, padded(4, Buffer.from('body')))),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.2/2',
    does: 'padded HEADERS',
    send: (c) => c.send(frame(FrameType.HEADERS, END | Flag.PADDED, 1, padded(8, REQUEST))),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.2/3',
    does: 'HEADERS with priority',
    send: (c) => c.send(frame(FrameType.HEADERS, END | Flag.PRIORITY, 1, Buffer.concat([priority(0, 255), REQUEST]))),
    expect: { response: 1 },
  },
  {
    id: 'generic/4/4',
    does: 'a POST with trailers',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('body'), 0), headersFrame(1, END, block([['x-trailer', 'yes']]))),
    expect: { response: 1 },
  },
  { id: 'generic/1/1', does: 'the preface and SETTINGS of a client', send: () => undefined, expect: { accepted: true } },
  {
    id: 'generic/3.10/1',
    does: 'HEADERS and one CONTINUATION',
    send: (c) => c.send(headersFrame(1, Flag.END_STREAM, REQUEST.subarray(0, 5)), frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST.subarray(5))),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.10/2',
    does: 'HEADERS and several CONTINUATIONs, one empty',
    send: (c) =>
      c.send(
        headersFrame(1, Flag.END_STREAM, REQUEST.subarray(0, 5)),
        frame(FrameType.CONTINUATION, 0, 1),
        frame(FrameType.CONTINUATION, 0, 1, REQUEST.subarray(5, 9)),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST.subarray(9)),
      ),
    expect: { response: 1 },
  },
  { id: 'generic/3.1/1', does: 'one DATA', send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('body'))), expect: { response: 1 } },
  {
    id: 'generic/3.1/2',
    does: 'several DATA',
    send: (c) =>
      c.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('bo'), 0), dataFrame(1, Buffer.alloc(0), 0), dataFrame(1, Buffer.from('dy'))),
    expect: { response: 1 },
  },
  { id: 'generic/3.2/1', does: 'one HEADERS', send: (c) => c.send(headersFrame(1)), expect: { response: 1 } },
  {
    id: 'generic/3.3/1',
    does: 'PRIORITY of weight 1, then the request',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 1, priority(0, 0)), headersFrame(1)),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.3/2',
    does: 'PRIORITY of weight 256, then the request',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 1, priority(0, 255)), headersFrame(1)),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.3/3',
    does: 'PRIORITY with a dependency, then the request',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 3, priority(1)), headersFrame(1)),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.3/4',
    does: 'PRIORITY exclusive, then the request',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 1, priority(0x8000_0000)), headersFrame(1)),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.3/5',
    does: 'PRIORITY on an idle stream, then the request on a lower one',
    send: (c) => c.send(frame(FrameType.PRIORITY, 0, 3, priority(0)), headersFrame(1)),
    expect: { response: 1 },
  },
  {
    id: 'generic/3.4/1',
    does: 'RST_STREAM of an open stream',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL)),
    expect: { accepted: true },
  },
  {
    id: 'generic/3.5/1',
    does: 'SETTINGS with values',
    send: (c) =>
      c.send(
        settingsFrame([
          [Setting.HEADER_TABLE_SIZE, 4096],
          [Setting.MAX_FRAME_SIZE, 32_768],
        ]),
      ),
    expect: { accepted: true },
  },
  { id: 'generic/3.7/1', does: 'PING', send: (c) => c.send(frame(FrameType.PING, 0, 0, Buffer.from('generic!'))), expect: { accepted: true } },
  {
    id: 'generic/3.8/1',
    does: 'GOAWAY NO_ERROR',
    send: (c) => c.send(frame(FrameType.GOAWAY, 0, 0, Buffer.concat([Buffer.alloc(8), Buffer.from('bye')]))),
    expect: { goingAway: true },
  },
  { id: 'generic/3.9/1', does: 'WINDOW_UPDATE on the connection', send: (c) => c.send(wordFrame(FrameType.WINDOW_UPDATE, 0, 1)), expect: { accepted: true } },
  {
    id: 'generic/3.9/2',
    does: 'WINDOW_UPDATE on a stream',
    send: (c) => c.send(headersFrame(1), wordFrame(FrameType.WINDOW_UPDATE, 1, 1)),
    expect: { response: 1 },
  },
  {
    id: 'generic/4/1',
    does: 'a GET',
    send: (c) => c.send(headersFrame(1, END, block(BASE.map(([n, v]) => [n, n === ':method' ? 'GET' : v])))),
    expect: { response: 1 },
  },
  {
    id: 'generic/4/2',
    does: 'a HEAD',
    send: (c) => c.send(headersFrame(1, END, block(BASE.map(([n, v]) => [n, n === ':method' ? 'HEAD' : v])))),
    expect: { response: 1 },
  },
  { id: 'generic/4/3', does: 'a POST', send: (c) => c.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('posted'))), expect: { response: 1 } },
  ...HPACK_REPRESENTATIONS.map(([id, does, fields]): Case => ({ id, does, send: (c) => c.send(headersFrame(1, END, fields)), expect: { response: 1 } })),
  {
    id: 'generic/4/x',
    does: 'a request with a matching content-length',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, with_([['content-length', '4']])), dataFrame(1, Buffer.from('body'))),
    expect: { response: 1 },
  },
];

describe('RFC 9113 / RFC 7541 conformance of the HTTP/2 layer (after h2spec)', () => {
  let server: H2Server;
  let port: number;
  const held: H2Stream[] = [];

  beforeAll(async () => {
    server = new H2Server({
      maxConcurrentStreams: 3,
      initialWindowSize: 65_535,
      connectionWindowSize: 1 << 20,
      maxHeaderListSize: 64 * 1024,
      onStream: (stream, headers) => {
        if (headers.includes('/hold')) {
          held.push(stream);
          return;
        }
        stream.onEnd = () => {
          stream.respond(encodeHeaderBlock([[':status', '200']]), false);
          stream.write(Buffer.from(BODY));
          stream.end(encodeHeaderBlock([['x-done', '1']]));
        };
      },
    });
    port = await server.listen('127.0.0.1', 0);
  });

  afterAll(() => server.close(100));

  it.each(CASES.map((c) => [c.id, c.does, c] as const))('%s %s', async (_id, _does, c) => {
    let client: RawClient;
    if (c.raw !== undefined) {
      const socket = net.connect(port, '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      client = new RawClient(socket);
      client.send(c.raw);
    } else {
      client = await RawClient.connect(port, c.settings ?? []);
    }
    try {
      await c.send(client);
      const e = c.expect;
      if ('connectionError' in e) {
        await client.waitClosed(3000);
        expect(client.goaway()?.code).toBe(e.connectionError);
        return;
      }
      if ('goingAway' in e) {
        // The client is going away: so does the server, with nothing to finish.
        await client.waitClosed(3000);
        expect(client.goaway()).toEqual({ lastStreamId: 0, code: ErrorCode.NO_ERROR });
        return;
      }
      if ('streamError' in e) {
        const rst = await client.waitFor(isType(FrameType.RST_STREAM, e.streamId), 3000);
        expect(rst?.payload.readUInt32BE(0)).toBe(e.streamError);
      } else if ('response' in e) {
        const end = await client.waitFor((f) => f.streamId === e.response && f.type === FrameType.HEADERS && (f.flags & Flag.END_STREAM) !== 0, 3000);
        expect(end).toBeDefined();
        const body = Buffer.concat(client.frames.filter(isType(FrameType.DATA, e.response)).map((f) => f.payload)).toString();
        expect(body).toBe(BODY);
      }
      // Whatever else happened, the connection is still served: a PING comes back, no GOAWAY.
      client.send(frame(FrameType.PING, 0, 0, Buffer.from('stillok!')));
      const pong = await client.waitFor((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0 && f.payload.toString() === 'stillok!', 3000);
      expect(pong).toBeDefined();
      expect(client.goaway()).toBeUndefined();
      expect(client.frames[0].type).toBe(FrameType.SETTINGS);
      if (c.id === '6.5.3/1' || c.id === '6.9.1/1') {
        // A window of one octet: the answer comes one octet per DATA frame, and no more.
        await client.waitFor(isType(FrameType.DATA, 1));
        await pause(50);
        expect(client.frames.filter(isType(FrameType.DATA, 1)).map((f) => f.payload.length)).toEqual([1]);
      }
      if (c.id === '6.7/2') expect(client.frames.filter((f) => f.type === FrameType.PING)).toHaveLength(1);
      if (c.id === '6.5.3/2' || c.id === '3.5/1')
        expect(client.frames.filter((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK).length).toBeGreaterThanOrEqual(1);
      if ('streamError' in e) expect(client.frames.filter(isType(FrameType.RST_STREAM, e.streamId))).toHaveLength(1);
    } finally {
      client.close();
      for (const stream of held.splice(0)) stream.reset();
    }
  });
});

// h2spec's own request: GET /, which the service answers (405) as soon as its headers are in, before
// the client has ended it. What follows on the stream must be judged as on any stream: the answer
// must not hide a protocol error, and a stream the client has ended or reset is known closed.
const GET_FIELDS: Fields = [
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/'],
  [':authority', 'localhost'],
];
const GET = block(GET_FIELDS);
const TEST = Buffer.from('test');

type ErrorExpectation = Extract<Expectation, { readonly connectionError: ErrorCode } | { readonly streamError: ErrorCode }>;
interface ServiceCase {
  readonly id: string;
  readonly does: string;
  readonly send: (client: RawClient) => void | Promise<void>;
  readonly expect: ErrorExpectation;
}

// Each sends exactly the frames of the h2spec case of the same number, and expects its answer.
const SERVICE_CASES: ServiceCase[] = [
  {
    // h2spec's 6.1/2 (DATA on a stream neither open nor half-closed (local)) sends the same frames.
    id: '5.1/5',
    does: 'half-closed (remote): DATA after a request that ended with its HEADERS',
    send: (c) => c.send(headersFrame(1, END, GET), dataFrame(1, TEST)),
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/6',
    does: 'half-closed (remote): a second HEADERS',
    send: (c) => c.send(headersFrame(1, END, GET), headersFrame(1, END, GET)),
    expect: { connectionError: ErrorCode.STREAM_CLOSED },
  },
  {
    id: '5.1/8',
    does: 'closed: DATA after the client reset the stream',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, GET), wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL), dataFrame(1, TEST)),
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/9',
    does: 'closed: HEADERS after the client reset the stream',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, GET), wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL), headersFrame(1, END, GET)),
    expect: { connectionError: ErrorCode.STREAM_CLOSED },
  },
  {
    id: '5.1/11',
    does: 'closed: DATA after the exchange ended',
    send: async (c) => {
      c.send(headersFrame(1, END, GET));
      await answered(c, 1);
      c.send(dataFrame(1, TEST));
    },
    expect: { streamError: ErrorCode.STREAM_CLOSED, streamId: 1 },
  },
  {
    id: '5.1/12',
    does: 'closed: HEADERS after the exchange ended',
    send: async (c) => {
      c.send(headersFrame(1, END, GET));
      await answered(c, 1);
      c.send(headersFrame(1, END, GET));
    },
    expect: { connectionError: ErrorCode.STREAM_CLOSED },
  },
  {
    id: '6.3/2',
    does: 'PRIORITY of 4 octets',
    send: (c) => c.send(headersFrame(1, END, GET), frame(FrameType.PRIORITY, 0, 1, Buffer.alloc(4))),
    expect: { streamError: ErrorCode.FRAME_SIZE_ERROR, streamId: 1 },
  },
  {
    id: '6.9/2',
    does: 'WINDOW_UPDATE of 0 on a stream',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, GET), wordFrame(FrameType.WINDOW_UPDATE, 1, 0)),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '6.9.1/3',
    does: 'WINDOW_UPDATEs pushing a stream window past 2^31-1',
    send: (c) =>
      c.send(headersFrame(1, Flag.END_HEADERS, GET), wordFrame(FrameType.WINDOW_UPDATE, 1, 0x7fff_ffff), wordFrame(FrameType.WINDOW_UPDATE, 1, 0x7fff_ffff)),
    expect: { streamError: ErrorCode.FLOW_CONTROL_ERROR, streamId: 1 },
  },
  {
    id: '8.1/1',
    does: 'a second HEADERS without END_STREAM',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, GET), dataFrame(1, TEST, 0), headersFrame(1, Flag.END_HEADERS, block([['x-test', 'ok']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.1/3',
    does: 'a pseudo-header field in trailers',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, GET), dataFrame(1, TEST, 0), headersFrame(1, END, block([[':method', 'POST']]))),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.6/1',
    does: 'content-length not the DATA length',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, with_([['content-length', '1']], GET_FIELDS)), dataFrame(1, TEST)),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
  {
    id: '8.1.2.6/2',
    does: 'content-length not the sum of several DATA',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, with_([['content-length', '1']], GET_FIELDS)), dataFrame(1, TEST, 0), dataFrame(1, TEST)),
    expect: { streamError: ErrorCode.PROTOCOL_ERROR, streamId: 1 },
  },
];

describe("the gRPC service's HTTP/2 port, as h2spec sees it (GET /, a request no gRPC client sends)", () => {
  let server: Http2GrpcServer;
  let port: number;
  const decided: unknown[] = [];

  beforeAll(async () => {
    const health = new HealthState();
    health.set('config', true);
    const h2 = { ...loadSettings({}).h2, maxConcurrentStreams: 3 };
    server = new Http2GrpcServer({
      limiter: { shouldRateLimit: (request) => (decided.push(request), Promise.resolve({ overallCode: 'OK', statuses: [], responseHeaders: [] })) },
      health,
      settings: { grpcHost: '127.0.0.1', grpcPort: 0, grpcMaxMessageBytes: 1024, grpcTls: { enabled: false }, ...TRANSPORT_DEFAULTS, h2 },
      logger: silentLogger(),
    });
    port = await server.start();
  });

  afterAll(() => server.stop(100));

  it.each(SERVICE_CASES.map((c) => [c.id, c.does, c] as const))('%s %s, answered before the request ended', async (_id, _does, c) => {
    const client = await RawClient.connect(port);
    try {
      await c.send(client);
      const e = c.expect;
      if ('connectionError' in e) {
        await client.waitClosed(3000);
        expect(client.goaway()?.code).toBe(e.connectionError);
        return;
      }
      const rst = await client.waitFor(isType(FrameType.RST_STREAM, e.streamId), 3000);
      expect(rst?.payload.readUInt32BE(0)).toBe(e.streamError);
      // One RST_STREAM, the error's; the 405 answer came first, and the connection is still served.
      expect(client.frames.filter(isType(FrameType.RST_STREAM, e.streamId))).toHaveLength(1);
      expect(client.decode(client.frames.find(isType(FrameType.HEADERS, 1))!).slice(0, 2)).toEqual([':status', '405']);
      client.send(frame(FrameType.PING, 0, 0, Buffer.from('stillok!')));
      const pong = await client.waitFor((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0 && f.payload.toString() === 'stillok!', 3000);
      expect(pong).toBeDefined();
      expect(client.goaway()).toBeUndefined();
    } finally {
      client.close();
    }
  });

  it('lets a client finish sending a request answered before it ended, and then serves the next', async () => {
    const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 1 << 20]]);
    // 200,000 bytes, past the stream's and the connection's initial windows: only reopened windows let them through.
    client.send(headersFrame(1, Flag.END_HEADERS, GET));
    for (let i = 0; i < 12; i++) client.send(dataFrame(1, Buffer.alloc(16_384), 0));
    for (let sent = 0; sent < 50; sent++) {
      if (client.frames.filter(isType(FrameType.WINDOW_UPDATE, 1)).length > 0) break;
      await pause(20);
    }
    client.send(dataFrame(1, Buffer.alloc(3_392)));
    client.send(headersFrame(3, END, GET));
    const next = await client.waitFor((f) => f.type === FrameType.HEADERS && f.streamId === 3);
    expect(client.decode(next!).slice(0, 2)).toEqual([':status', '405']);
    expect(client.frames.filter(isType(FrameType.RST_STREAM))).toEqual([]);
    expect(client.goaway()).toBeUndefined();
    client.close();
  });

  it('answers 405 with a body, which a window of one octet lets out one octet at a time', async () => {
    const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 1]]);
    client.send(headersFrame(1, END, GET));
    const head = await client.waitFor(isType(FrameType.HEADERS, 1));
    expect(client.decode(head!)).toEqual([':status', '405', 'allow', 'POST', 'content-type', 'text/plain']);
    await client.waitFor(isType(FrameType.DATA, 1));
    await pause(50);
    expect(client.frames.filter(isType(FrameType.DATA, 1)).map((f) => f.payload.length)).toEqual([1]);
    client.close();
  });

  it('refuses a stream past its concurrency limit while the answers wait on a zero window', async () => {
    const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 0]]);
    client.send(headersFrame(1, END, GET), headersFrame(3, END, GET), headersFrame(5, END, GET), headersFrame(7, END, GET));
    const rst = await client.waitFor(isType(FrameType.RST_STREAM, 7));
    expect(rst?.payload.readUInt32BE(0)).toBe(ErrorCode.REFUSED_STREAM);
    client.close();
  });

  it('refuses a malformed request before the service sees it', async () => {
    const client = await RawClient.connect(port);
    const call = block([
      [':method', 'POST'],
      [':path', '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'],
      ['content-type', 'application/grpc'],
    ]);
    client.send(headersFrame(1, Flag.END_HEADERS, call), dataFrame(1, Buffer.from([0, 0, 0, 0, 0])));
    const rst = await client.waitFor(isType(FrameType.RST_STREAM, 1));
    expect(rst?.payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    expect(decided).toEqual([]);
    client.close();
  });
});
