-- Acknowledge a reserved task: done with it (see ack_reservation).
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases,
--       attempts, payloads, dead, pending
-- ARGV: id, rid, channel prefix
-- Returns 1 when acknowledged, 0 when the reservation was lost (it ended and
-- the task went back, possibly to another consumer, whose claim is left alone).
return ack_reservation(queue_keys(), ARGV[1], ARGV[2], ARGV[3])
