import { loadSettings, SettingsError } from '../../../src/settings/settings';

describe('the HTTP/2 layer settings (H2_*)', () => {
  it('default to bounds that fit small ShouldRateLimit calls from a few proxy connections', () => {
    expect(loadSettings({}).h2).toEqual({
      maxConcurrentStreams: 1000,
      maxHeaderListBytes: 16 * 1024,
      streamBufferBytes: 64 * 1024,
      connectionBufferBytes: 1024 * 1024,
      totalBufferBytes: 64 * 1024 * 1024,
      resetBurst: 1000,
      resetsPerSecond: 33,
      idleTimeoutMs: 300_000,
      handshakeTimeoutMs: 5_000,
    });
  });

  it('are read from the environment', () => {
    const h2 = loadSettings({
      H2_MAX_CONCURRENT_STREAMS: '250',
      H2_MAX_HEADER_LIST_BYTES: '8192',
      H2_STREAM_BUFFER_BYTES: '16384',
      H2_CONNECTION_BUFFER_BYTES: '65535',
      H2_TOTAL_BUFFER_BYTES: '0',
      H2_RESET_BURST: '100',
      H2_RESETS_PER_SECOND: '0',
      H2_IDLE_TIMEOUT_MS: '0',
      H2_HANDSHAKE_TIMEOUT_MS: '2000',
    }).h2;
    expect(h2).toEqual({
      maxConcurrentStreams: 250,
      maxHeaderListBytes: 8192,
      streamBufferBytes: 16384,
      connectionBufferBytes: 65535,
      totalBufferBytes: 0,
      resetBurst: 100,
      resetsPerSecond: 0,
      idleTimeoutMs: 0,
      handshakeTimeoutMs: 2000,
    });
  });

  it.each([
    ['H2_MAX_CONCURRENT_STREAMS', { H2_MAX_CONCURRENT_STREAMS: '0' }],
    ['H2_MAX_HEADER_LIST_BYTES', { H2_MAX_HEADER_LIST_BYTES: '100' }],
    ['H2_STREAM_BUFFER_BYTES', { H2_STREAM_BUFFER_BYTES: '2147483648' }],
    ['H2_CONNECTION_BUFFER_BYTES', { H2_CONNECTION_BUFFER_BYTES: '65534' }],
    ['H2_CONNECTION_BUFFER_BYTES', { H2_STREAM_BUFFER_BYTES: '1048576', H2_CONNECTION_BUFFER_BYTES: '65535' }],
    ['H2_TOTAL_BUFFER_BYTES', { H2_TOTAL_BUFFER_BYTES: '-1' }],
    ['H2_RESET_BURST', { H2_RESET_BURST: '0' }],
    ['H2_RESETS_PER_SECOND', { H2_RESETS_PER_SECOND: '-1' }],
    ['H2_IDLE_TIMEOUT_MS', { H2_IDLE_TIMEOUT_MS: 'soon' }],
    ['H2_HANDSHAKE_TIMEOUT_MS', { H2_HANDSHAKE_TIMEOUT_MS: '10' }],
  ] as const)('%s rejects %j, naming the variable', (variable, env) => {
    expect(() => loadSettings(env)).toThrow(SettingsError);
    expect(() => loadSettings(env)).toThrow(`invalid setting ${variable}:`);
  });
});
