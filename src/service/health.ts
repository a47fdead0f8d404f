import type { Store } from '../limiter/store';

/**
 * Serving state of the service names the health protocol knows ("" and "ratelimit").
 * The service serves only while every condition holds: a config has loaded, the store answers,
 * and shutdown has not begun. Listeners (gRPC Watch streams, the HTTP healthcheck) see every change.
 */

export type ServingStatus = 'SERVING' | 'NOT_SERVING';

/** Named reasons the service may not serve. Only `config` starts unsatisfied. */
export type HealthCondition = 'config' | 'store' | 'running';

/** Service names answered by grpc.health.v1: the whole server and the rate-limit service. */
export const HEALTH_SERVICES: readonly string[] = ['', 'ratelimit'];

export type HealthListener = (status: ServingStatus) => void;

export class HealthState {
  private readonly conditions = new Map<HealthCondition, boolean>([
    ['config', false],
    ['store', true],
    ['running', true],
  ]);
  private current: ServingStatus = 'NOT_SERVING';
  private readonly listeners = new Set<HealthListener>();

  constructor(private readonly services: readonly string[] = HEALTH_SERVICES) {}

  /** True when `service` is one this server reports on. */
  knows(service: string): boolean {
    return this.services.includes(service);
  }

  /** The status of a known service, undefined for an unknown one. */
  status(service = ''): ServingStatus | undefined {
    return this.knows(service) ? this.current : undefined;
  }

  /** True while `condition` holds. */
  holds(condition: HealthCondition): boolean {
    return this.conditions.get(condition) === true;
  }

  /** True while every condition holds. */
  serving(): boolean {
    return this.current === 'SERVING';
  }

  /** Records one condition; listeners hear about it only when the overall status flips. */
  set(condition: HealthCondition, ok: boolean): void {
    if (this.conditions.get(condition) === ok) return;
    this.conditions.set(condition, ok);
    let next: ServingStatus = 'SERVING';
    for (const v of this.conditions.values()) if (!v) next = 'NOT_SERVING';
    if (next === this.current) return;
    this.current = next;
    for (const listener of [...this.listeners]) listener(next);
  }

  /** Shutdown has begun: NOT_SERVING from now on. */
  beginShutdown(): void {
    this.set('running', false);
  }

  /** Calls `listener` on every change; returns the unsubscribe function. */
  subscribe(listener: HealthListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/**
 * Mirrors store.isHealthy() into `health` every `intervalMs` (timer unref'd so it never keeps the
 * process alive). Returns the stop function.
 */
export function watchStoreHealth(options: { store: Store; health: HealthState; intervalMs?: number }): () => void {
  const { store, health } = options;
  health.set('store', store.isHealthy());
  const timer = setInterval(() => health.set('store', store.isHealthy()), options.intervalMs ?? 250);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Readiness (GET /readyz): a config has loaded and shutdown has not begun, and the store answers
 * unless STORE_FAILURE_POLICY answers without it (allow, deny, local). A readiness that followed the
 * store under those policies would take every pod out of the Service during a store outage, and the
 * policy could never answer; under `error` it does follow the store, so calls go to the pods that
 * can reach it.
 */
export function isReady(health: HealthState, settings: { readonly storeFailurePolicy: string }): boolean {
  const storeNeeded = settings.storeFailurePolicy === 'error';
  return health.holds('config') && health.holds('running') && (!storeNeeded || health.holds('store'));
}
