import type { Static } from "@sinclair/typebox";
import {
  type APPLY_STATES,
  ApplyResultSchema,
  ApplyStatusSchema,
  ApplyUpdatesRequestSchema,
  DownloadUpdatesRequestSchema,
  HookRecordSchema,
  RebootReportSchema,
  RecoverySchema,
} from "./apply-schemas.js";
import {
  AdvisorySchema,
  DownloadResultSchema,
  PackageUpdateSchema,
  ServiceToRestartSchema,
  SystemStatusSchema,
} from "./check-schemas.js";
import { ComplianceSchema } from "./compliance.js";
import { ApplyHistorySchema, ApplyRecordSchema, type RequesterSchema } from "./history-schemas.js";
import {
  ScheduleRequestSchema,
  ScheduleRunSchema,
  ScheduleSchema,
  WindowSchema,
} from "./schedule/schemas.js";

/*
 * The system area's schemas, registered with the app (in this order, the OpenAPI document's), and the
 * request and response types they give. The schemas themselves are in check-, apply- and history-schemas.ts
 * and schedule/schemas.ts.
 */

export const systemSharedSchemas = [
  AdvisorySchema,
  PackageUpdateSchema,
  ServiceToRestartSchema,
  SystemStatusSchema,
  ApplyUpdatesRequestSchema,
  DownloadUpdatesRequestSchema,
  DownloadResultSchema,
  RebootReportSchema,
  RecoverySchema,
  HookRecordSchema,
  ApplyStatusSchema,
  ApplyResultSchema,
  ApplyRecordSchema,
  ApplyHistorySchema,
  WindowSchema,
  ScheduleRequestSchema,
  ScheduleRunSchema,
  ScheduleSchema,
  ComplianceSchema,
];

export type ApplyState = (typeof APPLY_STATES)[number];
export type SystemStatus = Static<typeof SystemStatusSchema>;
export type DownloadResult = Static<typeof DownloadResultSchema>;
export type ApplyUpdatesRequest = Static<typeof ApplyUpdatesRequestSchema>;
export type RebootReport = Static<typeof RebootReportSchema>;
export type ApplyStatus = Static<typeof ApplyStatusSchema>;
export type ApplyResult = Static<typeof ApplyResultSchema>;
export type ApplyRecord = Static<typeof ApplyRecordSchema>;
export type Requester = Static<typeof RequesterSchema> & { request_id: string };
