import { randomUUID } from 'node:crypto';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, type Span, type TextMapGetter, type TextMapPropagator } from '@opentelemetry/api';
import { CompositePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { B3Propagator } from '@opentelemetry/propagator-b3';
import { envDetector, detectResources, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Logger } from '../log';
import type { TracingSettings } from '../settings/settings';
import type { CallOutcome, CallSpan, CallTracer } from './call-tracer';

/**
 * OpenTelemetry tracing as the reference offers it: OTLP over HTTP (protobuf) or gRPC
 * (TRACING_EXPORTER_PROTOCOL), the exporter configured by the standard OTEL_EXPORTER_OTLP_* variables
 * (endpoint, headers, timeout, certificates; OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=http/json selects
 * JSON over HTTP), spans batched; resource attributes service.name / service.namespace /
 * service.instance.id from TRACING_SERVICE_* (a random UUID when no instance id is given) over
 * OTEL_RESOURCE_ATTRIBUTES. A call continues the trace of its `traceparent` (W3C) or B3 headers;
 * new traces are sampled at TRACING_SAMPLING_RATE, and a caller's sampling decision is followed.
 * This module is imported only when TRACING_ENABLED is true.
 */

const SPAN_NAME = 'envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

/**
 * Longest attribute value and status message a span keeps, in characters: the domain and a failed
 * call's message come from the caller, and up to the batch processor's queue of spans wait in memory.
 */
export const SPAN_TEXT_MAX_LENGTH = 256;

const headerGetter: TextMapGetter<(name: string) => string | undefined> = {
  get: (header, key) => header(key.toLowerCase()),
  keys: () => [],
};

async function createExporter(protocol: TracingSettings['exporterProtocol']): Promise<SpanExporter> {
  if (protocol === 'grpc') return new (await import('@opentelemetry/exporter-trace-otlp-grpc')).OTLPTraceExporter();
  const httpProtocol = process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? process.env.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (httpProtocol === 'http/json') return new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter();
  return new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
}

class OtelCallSpan implements CallSpan {
  private ended = false;
  constructor(private readonly span: Span) {}

  end(outcome: CallOutcome): void {
    if (this.ended) return;
    this.ended = true;
    const span = this.span;
    if (outcome.domain !== undefined) span.setAttribute('domain', outcome.domain);
    if (outcome.overallCode !== undefined) span.setAttribute('ratelimit.overall_code', outcome.overallCode);
    span.setAttribute('rpc.grpc.status_code', outcome.grpcCode);
    if (outcome.grpcCode !== 0) span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.message?.slice(0, SPAN_TEXT_MAX_LENGTH) });
    span.end();
  }
}

/** Builds the tracer of TRACING_* and OTEL_*; shutdown() flushes what is buffered. */
export async function createOtelTracer(settings: TracingSettings, logger: Logger): Promise<CallTracer> {
  const instanceId = settings.serviceInstanceId === '' ? randomUUID() : settings.serviceInstanceId;
  const resource = (await detectResources({ detectors: [envDetector] })).merge(
    resourceFromAttributes({
      'service.name': settings.serviceName,
      'service.namespace': settings.serviceNamespace,
      'service.instance.id': instanceId,
    }),
  );
  const exporter = await createExporter(settings.exporterProtocol);
  const provider = new BasicTracerProvider({
    resource,
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.samplingRate) }),
    spanLimits: { attributeValueLengthLimit: SPAN_TEXT_MAX_LENGTH },
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  const propagator: TextMapPropagator = new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new B3Propagator()] });
  const tracer = provider.getTracer('slidegate');
  logger.info(
    {
      protocol: settings.exporterProtocol,
      service: settings.serviceName,
      namespace: settings.serviceNamespace,
      instance: instanceId,
      samplingRate: settings.samplingRate,
    },
    'tracing enabled',
  );
  return {
    startCall(header) {
      const parent = propagator.extract(ROOT_CONTEXT, header, headerGetter);
      const span = tracer.startSpan(
        SPAN_NAME,
        {
          kind: SpanKind.SERVER,
          attributes: { 'rpc.system': 'grpc', 'rpc.service': 'envoy.service.ratelimit.v3.RateLimitService', 'rpc.method': 'ShouldRateLimit' },
        },
        parent,
      );
      return new OtelCallSpan(span);
    },
    shutdown: () => provider.shutdown(),
  };
}
