import { loadSettings, type Settings } from '../../src/settings/settings';

/** What the gRPC transports take from the settings besides where they listen, at the service's defaults. */
export const TRANSPORT_DEFAULTS: Pick<Settings, 'h2' | 'grpcMaxConnections'> = Object.freeze({
  h2: loadSettings({}).h2,
  grpcMaxConnections: loadSettings({}).grpcMaxConnections,
});
