// Answering approvals from the view's buttons. The answer goes to the daemon, which
// broadcasts `approval_resolved` to every attached client, so every view (this one, the
// terminal's, another window's) drops the approval when its event arrives, not when a button
// is pressed. The first answer wins: a later one is refused with APPROVAL_RESOLVED, which
// says who answered, and that is reported in words, not as a failure.

import { ErrorCode, RpcError, type ApprovalAnswered, type AttachedSession } from "tether-client/browser";

export type ApprovalChoice = "allow" | "always" | "deny";

export const CHOICES: readonly ApprovalChoice[] = ["allow", "always", "deny"];

/** The decision and scope `approval/respond` takes for a button. */
export function decisionFor(choice: ApprovalChoice): { decision: "allow" | "deny"; scope: "once" | "always" } {
  switch (choice) {
    case "allow":
      return { decision: "allow", scope: "once" };
    case "always":
      return { decision: "allow", scope: "always" };
    case "deny":
      return { decision: "deny", scope: "once" };
  }
}

export type AnswerOutcome = { answered: true } | { answered: false; reason: string };

/** Answer `approvalId` of `session`; rejects only for failures other than "already answered". */
export async function answerApproval(
  session: AttachedSession,
  approvalId: string,
  choice: ApprovalChoice,
): Promise<AnswerOutcome> {
  if (!CHOICES.includes(choice)) return { answered: false, reason: `not an answer: ${String(choice)}` };
  const { decision, scope } = decisionFor(choice);
  try {
    await session.respond(approvalId, decision, { scope });
    return { answered: true };
  } catch (err) {
    if (err instanceof RpcError && err.code === ErrorCode.APPROVAL_RESOLVED) {
      const first = err.data as ApprovalAnswered | undefined;
      const who = first ? `${first.by} (${first.decision})` : "another client";
      return { answered: false, reason: `already answered by ${who}` };
    }
    if (err instanceof RpcError && err.code === ErrorCode.APPROVAL_NOT_FOUND) {
      return { answered: false, reason: "that approval is no longer pending" };
    }
    throw err;
  }
}
