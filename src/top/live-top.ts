import type { SharedDocuments } from '../limiter/replica-exchange';
import { monotonicClock, type Clock, type DescriptorOutcome, type LimiterObserver } from '../limiter/types';
import { mergeViews } from './top-report';
import type { TopSketch, WindowView } from './top-sketch';

/**
 * The live view of one process, kept moving and shared: a timer advances the sketch's window; with
 * a shared store (Redis) the process publishes its view every PUBLISH_EVERY_MS under its own name,
 * and answers with its own fresh view merged with every other live one, so every worker of every
 * replica answers with the same picture (at most one publishing period behind for the others).
 */

/** The documents' kind in the shared store. */
export const TOP_DOCUMENT_KIND = 'slidegate-top';
/** The shape of a published view; a process skips the views of another (a rolling upgrade). */
const DOCUMENT_VERSION = 2;
export const PUBLISH_EVERY_MS = 1_000;
/** A published view outlives its publisher by this much: a few missed periods, then it is gone. */
export const PUBLISHED_TTL_MS = 3 * PUBLISH_EVERY_MS;
/** Views read at most (processes of every replica). */
export const MAX_VIEWS = 256;

export interface LiveTopOptions {
  readonly sketch: TopSketch;
  /** Entries per rule in a view (TOP_ENTRIES). */
  readonly keep: number;
  /** The shared store's documents; absent: this process alone. */
  readonly documents?: SharedDocuments;
  /** This replica's name: the workers of one replica share it. */
  readonly replica: string;
  /** This process's name, unique among every process sharing the store. */
  readonly process: string;
  readonly clock?: Clock;
  /** A failed publish or read (reported once until one succeeds again). */
  readonly onError?: (err: Error) => void;
}

/** What a process publishes. */
interface Published {
  readonly version: number;
  readonly replica: string;
  readonly process: string;
  readonly view: WindowView;
}

/** What /top is computed from: the merged view, how many replicas it covers, and whether every part could be read. */
export interface MergedTop {
  readonly view: WindowView;
  readonly replicas: number;
  readonly complete: boolean;
}

export class LiveTop {
  private readonly sketch: TopSketch;
  private readonly keep: number;
  private readonly documents: SharedDocuments | undefined;
  private readonly replica: string;
  private readonly process: string;
  private readonly clock: Clock;
  private readonly onError: (err: Error) => void;
  private readonly timers: NodeJS.Timeout[] = [];
  private failing = false;
  private publishing: Promise<void> | undefined;

  constructor(options: LiveTopOptions) {
    this.sketch = options.sketch;
    this.keep = options.keep;
    this.documents = options.documents;
    this.replica = options.replica;
    this.process = options.process;
    this.clock = options.clock ?? monotonicClock;
    this.onError = options.onError ?? (() => undefined);
  }

  /** `observer` with this view fed from the same outcomes: one more call per outcome. */
  observing(observer: LimiterObserver): LimiterObserver {
    const sketch = this.sketch;
    return {
      onDescriptor(outcome: DescriptorOutcome): void {
        observer.onDescriptor(outcome);
        sketch.record(outcome);
      },
      onGlobalShadowMode: observer.onGlobalShadowMode?.bind(observer),
      onReplay: observer.onReplay?.bind(observer),
      onReservation: observer.onReservation?.bind(observer),
    };
  }

  /** Starts the timers: the window moves every step (at most a second), and the view is published every second. */
  start(): void {
    const tick = Math.min(this.sketch.stepMs, PUBLISH_EVERY_MS);
    this.timers.push(setInterval(() => this.sketch.advance(this.clock.nowMs()), tick).unref());
    if (this.documents !== undefined) this.timers.push(setInterval(() => void this.publish(), PUBLISH_EVERY_MS).unref());
  }

  /** Stops the timers (and waits for a publish under way). */
  async stop(): Promise<void> {
    for (const timer of this.timers.splice(0)) clearInterval(timer);
    await this.publishing;
  }

  /** Publishes this process's view now (the timer does it every second). Never rejects. */
  publish(): Promise<void> {
    const documents = this.documents;
    if (documents === undefined || this.publishing !== undefined) return this.publishing ?? Promise.resolve();
    const published: Published = { version: DOCUMENT_VERSION, replica: this.replica, process: this.process, view: this.localView() };
    this.publishing = documents
      .put(TOP_DOCUMENT_KIND, this.process, JSON.stringify(published), PUBLISHED_TTL_MS)
      .then(
        () => this.succeeded(),
        (err: unknown) => this.failed(err),
      )
      .finally(() => {
        this.publishing = undefined;
      });
    return this.publishing;
  }

  /** This process's fresh view merged with every other live one. */
  async merged(): Promise<MergedTop> {
    const local = this.localView();
    if (this.documents === undefined) return { view: local, replicas: 1, complete: true };
    let documents: string[];
    try {
      documents = await this.documents.all(TOP_DOCUMENT_KIND, MAX_VIEWS);
      this.succeeded();
    } catch (err) {
      this.failed(err);
      return { view: local, replicas: 1, complete: false };
    }
    const views: WindowView[] = [local];
    const replicas = new Set<string>([this.replica]);
    for (const document of documents) {
      const other = parsePublished(document);
      // Its own copy is older than `local`; a view of another window length does not add up with this one.
      if (other === undefined || other.process === this.process || other.view.windowMs !== local.windowMs) continue;
      views.push(other.view);
      replicas.add(other.replica);
    }
    return { view: mergeViews(views, this.keep), replicas: replicas.size, complete: true };
  }

  private localView(): WindowView {
    this.sketch.advance(this.clock.nowMs());
    return this.sketch.view(this.keep);
  }

  private succeeded(): void {
    this.failing = false;
  }

  private failed(err: unknown): void {
    if (!this.failing) this.onError(err instanceof Error ? err : new Error(String(err)));
    this.failing = true;
  }
}

/** A published document, or undefined when it is not one (another version, or damaged). */
function parsePublished(document: string): Published | undefined {
  let value: unknown;
  try {
    value = JSON.parse(document);
  } catch {
    return undefined;
  }
  const p = value as Partial<Published> | null;
  if (typeof p !== 'object' || p === null || p.version !== DOCUMENT_VERSION || typeof p.replica !== 'string' || typeof p.process !== 'string') return undefined;
  const view = p.view as Partial<WindowView> | undefined;
  if (typeof view !== 'object' || view === null || typeof view.windowMs !== 'number' || typeof view.stepMs !== 'number' || !Array.isArray(view.rules))
    return undefined;
  return p as Published;
}
