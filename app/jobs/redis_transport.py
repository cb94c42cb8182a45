"""kombu's Redis transport, with an acknowledgement that never holds a prefetch slot for ever.

kombu's Redis QoS removes an acknowledged message from Redis first and frees the consumer's prefetch slot after:
when Redis is away (killed, restarting) the first step raises and the slot is never freed. A consumer whose every
slot was taken by jobs that ended while Redis was away then never asks Redis for another message (it is not
waiting on a socket either, so it does not notice the broken connection and reconnect): the jobs queued behind
stay QUEUED for ever (tests/e2e/test_chaos_broker.py). Here the slot is freed whatever Redis answers. A message
whose acknowledgement did not reach Redis comes back after the visibility timeout and is dropped by the
QUEUED -> STARTING guard (docs/architecture.md#duplicate-deliveries).

``create_celery`` uses this transport for ``redis://`` broker URLs (``broker_transport``).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis, virtual


class QoS(redis.QoS):
    def ack(self, delivery_tag: Any) -> None:
        try:
            self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            if requeue:
                self.restore_by_tag(delivery_tag, leftmost=True)
            else:
                self._remove_from_indices(delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
