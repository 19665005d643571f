"""The benchmark requests: deterministic texts, sized as in the issue.

1. `standard`  a ~120-word support ticket, 3 questions (yes/no, 4-way described choice, 5-level score);
2. `choice40`  the ticket, one choice among 40 described product areas;
3. `choice255` the ticket, one choice among 255 queues ("Queue 001", one-line descriptions);
4. `state20`   20 questions about a ~2,000-token system state (run cold and warm).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from decide.request import DecisionRequest, Option, Question

TICKET = (
    "Hello, I was charged twice for my annual Pro subscription this month: once on the 3rd and again on the 5th, "
    "both for $149. My bank statement shows two separate transactions with the same invoice number. I contacted "
    "support last week through the chat widget but never got a reply, and the second charge has pushed my account "
    "into overdraft, which is costing me fees. I have been a customer for four years and I like the product, but "
    "this is really frustrating. Please refund the duplicate charge as soon as possible and confirm by email. Also, "
    "when I try to download the invoices from the billing page, the page keeps loading forever, so I cannot send "
    "them to my accountant. Thanks, Maria"
)

TEAMS = [
    Option("billing", "payments, invoices, refunds and subscriptions"),
    Option("technical", "bugs, errors, outages and pages that do not load"),
    Option("account", "login, passwords, profile and account settings"),
    Option("sales", "pricing questions, upgrades and new purchases"),
]
URGENCY = ["very low", "low", "medium", "high", "critical"]

AREAS = ["billing", "invoices", "refunds", "subscriptions", "login", "passwords", "exports", "imports", "search",
         "reports", "dashboards", "notifications", "email", "mobile app", "desktop app", "API", "webhooks",
         "integrations", "permissions", "teams", "storage", "backups", "security", "privacy", "onboarding",
         "pricing", "discounts", "taxes", "shipping", "returns", "catalog", "inventory", "checkout", "payments",
         "analytics", "localization", "accessibility", "performance", "uptime", "feedback"]  # fmt: skip
KINDS = ["questions about", "problems with", "changes to", "requests for"]
REGIONS = ["EU", "US", "APAC", "LATAM", "MEA", "ANZ"]
TOPICS = ["billing", "login", "exports", "the mobile app", "the API", "checkout", "reports", "shipping",
          "refunds", "invoices", "security"]  # fmt: skip
TIERS = ["free", "pro", "enterprise", "partner"]


# The standard request's questions as a System One body's `questions`.
SYSTEMONE_QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle this ticket?",
        "criteria": {o.value: o.description for o in TEAMS},
    },
    "urgency": {"type": "score", "instructions": "How urgent is this ticket?", "criteria": URGENCY},
}


def standard() -> DecisionRequest:
    return DecisionRequest.of(
        TICKET,
        [
            Question.predicate("Is the customer asking for a refund?"),
            Question.choice("Which team should handle this ticket?", TEAMS),
            Question.score("How urgent is this ticket?", URGENCY),
        ],
    )


def choice40() -> DecisionRequest:
    options = [Option(area, f"{KINDS[i % len(KINDS)]} {area} in the product") for i, area in enumerate(AREAS)]
    return DecisionRequest.of(TICKET, [Question.choice("Which product area is this ticket about?", options)])


def choice255() -> DecisionRequest:
    combos = itertools.product(TIERS, TOPICS, REGIONS)
    options = [Option(f"Queue {i + 1:03d}", f"{tier} {topic}, {region}")
               for i, (tier, topic, region) in zip(range(255), combos)]  # fmt: skip
    return DecisionRequest.of(TICKET, [Question.choice("Which support queue should receive this ticket?", options)])


SERVICES = ["checkout-api", "payments-gateway", "search-indexer", "auth-service", "email-worker", "cdn-edge",
            "orders-db", "inventory-sync", "recommendation-engine", "image-resizer", "billing-cron", "webhook-relay",
            "mobile-backend", "analytics-pipeline", "session-store", "rate-limiter"]  # fmt: skip
STATUSES = ["healthy", "degraded", "healthy", "healthy", "down", "healthy", "degraded"]


def state_text(services: int = 16, events: int = 20) -> str:
    """A system status report of ~2,000 tokens (SmolLM2 tokenizer), built from fixed arithmetic patterns."""
    lines = ["System status report for the production cluster eu-west-2, generated 2024-05-02 14:30 UTC.", ""]
    for i, name in enumerate(SERVICES[:services]):
        lines.append(
            f"Service {name}: status {STATUSES[i % len(STATUSES)]}, {2 + i % 5} of {3 + i % 5} replicas ready, "
            f"p95 latency {120 + 37 * i} ms, error rate {(i * 7) % 13 / 10:.1f}%, CPU {35 + (i * 11) % 60}%, "
            f"memory {40 + (i * 13) % 55}%, last deploy 2024-05-0{1 + i % 2} {8 + i % 12:02d}:{(i * 17) % 60:02d} "
            f"UTC by team {['core', 'growth', 'platform', 'data'][i % 4]}, version 3.{i % 9}.{(i * 5) % 17}."
        )
    lines.append("")
    for k in range(events):
        service = SERVICES[(k * 5) % services]
        lines.append(
            f"Event {k + 1}: at {9 + k // 4:02d}:{(k * 23) % 60:02d} UTC {service} "
            f"{['restarted after an out-of-memory kill', 'raised a latency alert', 'scaled up by one replica', 'failed a health check', 'completed a deploy', 'rotated its TLS certificate'][k % 6]}"
            f"; on-call engineer {['Ana', 'Ben', 'Chen', 'Dara'][k % 4]} {['acknowledged it', 'has not acknowledged it yet', 'closed it as resolved'][k % 3]}."
        )
    lines += ["", "Queues: orders backlog 1,240 messages (normal below 500); email backlog 18 messages; "
              "webhook retries 312 pending, oldest 47 minutes.", "Open incidents: 2 (SEV-2 checkout latency, "
              "SEV-3 delayed emails). Change freeze: none. Next maintenance window: Saturday 02:00 UTC."]  # fmt: skip
    return "\n".join(lines)


STATE_PREDICATES = [
    "Is any service down?",
    "Is the checkout-api healthy?",
    "Is the orders backlog above its normal level?",
    "Is there an open SEV-1 incident?",
    "Did any service restart after an out-of-memory kill?",
    "Is a change freeze in effect?",
    "Are all replicas of the payments-gateway ready?",
    "Is any alert still unacknowledged?",
    "Is the email backlog a problem right now?",
    "Did the auth-service fail a health check?",
    "Is the error rate of any service above 1%?",
    "Should the on-call engineer be paged now?",
    "Is the cluster in the eu-west-2 region?",
    "Was any deploy made by team growth?",
]


def state20() -> DecisionRequest:
    questions = [Question.predicate(q) for q in STATE_PREDICATES]
    questions += [
        Question.choice("Which service needs attention first?", ["checkout-api", "orders-db", "email-worker"]),
        Question.choice("Which team owns the most degraded services?", ["core", "growth", "platform", "data"]),
        Question.choice("What is the most likely next action?", ["rollback", "scale up", "wait", "escalate"]),
        Question.score("How severe is the overall situation?", URGENCY),
        Question.score("How confident are you that customers are affected?", URGENCY),
        Question.score("How busy is the on-call engineer?", URGENCY),
    ]
    return DecisionRequest.of(state_text(), questions)


@dataclass(frozen=True)
class Case:
    """A request and how the slow paths sample it (see bench/README.md, "Sampling").

    `reference_sample`: (question, candidate indices) pairs the reference runs on, None = all of them;
    `prompt_once_sample`: question indices the prompt-once path runs on, None = all;
    `heavy`: one timed round, which is also the checked run (no separate warm-up run);
    `warm`: the trie's prefix cache is kept between rounds (else cleared before each).
    """

    name: str
    build: object  # () -> DecisionRequest
    reference_sample: tuple[tuple[int, tuple[int, ...] | None], ...] | None = None
    prompt_once_sample: tuple[int, ...] | None = None
    heavy: bool = False


CASES = {
    "standard": Case("standard", standard),
    "choice40": Case("choice40", choice40, reference_sample=((0, (0, 13, 26, 39)),)),
    "choice255": Case("choice255", choice255, reference_sample=((0, (0, 127)),), heavy=True),
    "state20": Case("state20", state20, reference_sample=((0, None),), prompt_once_sample=(0, 19), heavy=True),
}
