<?php

declare(strict_types=1);

use Ferrolock\Bridge\Symfony\FerrolockStore;
use PHPUnit\Framework\TestCase;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidArgumentException;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockAcquiringException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\PersistingStoreInterface;

/** FerrolockStore against Debian's symfony/lock 5.4, on a real redis-server. */
final class SymfonyStoreTest extends TestCase
{
    private Redis $redis;

    /** Reads the child's next line: `$want`, or fails with its stderr. */
    private function expectLine(string $want, $out, $err): void
    {
        $line = fgets($out);
        if ($line !== "$want\n") {
            $this->fail('child said ' . var_export($line, true) . ': ' . stream_get_contents($err));
        }
    }

    protected function setUp(): void
    {
        $u = parse_url(redis_url());
        $this->redis = new Redis();
        $this->redis->connect($u['host'], $u['port']);
        $this->redis->select((int) ltrim($u['path'] ?? '/0', '/'));
    }

    private function factory(array $options = []): LockFactory
    {
        return new LockFactory(new FerrolockStore(redis_url(), 300.0, $options));
    }

    public function testItIsAPersistingAndBlockingStore(): void
    {
        $store = new FerrolockStore(redis_url());
        $this->assertInstanceOf(PersistingStoreInterface::class, $store);
        $this->assertInstanceOf(BlockingStoreInterface::class, $store);
    }

    public function testSaveExistsDeleteOnTheFerrolockKey(): void
    {
        $store = new FerrolockStore(redis_url());
        $n = uniq('sf');
        $key = new Key($n);
        $this->assertFalse($store->exists($key));
        $store->save($key);
        $this->assertTrue($store->exists($key));
        $this->assertSame(1, $this->redis->exists("Lock:$n"), 'key Lock:<resource>, shared with ferrolock');
        $other = new Key($n);
        try {
            $store->save($other);
            $this->fail('a second key saved');
        } catch (LockConflictedException) {
        }
        $this->assertFalse($store->exists($other));
        $store->delete($other); // not ours: nothing happens
        $this->assertTrue($store->exists($key));
        $store->delete($key);
        $this->assertFalse($store->exists($key));
        $this->assertSame(0, $this->redis->exists("Lock:$n"));
    }

    public function testLocksExcludeEachOtherAndRedisLock(): void
    {
        $n = uniq('sf-interop');
        $a = $this->factory()->createLock($n, 30);
        $b = $this->factory()->createLock($n, 30);
        $this->assertTrue($a->acquire());
        $this->assertFalse($b->acquire());
        $this->assertFalse((new RedisLock())->lock($n), 'RedisLock sees the Symfony lock');
        $this->assertTrue($a->isAcquired());
        $a->release();
        $this->assertFalse($a->isAcquired());
        $this->assertTrue($b->acquire());
        $b->release();
    }

    public function testExpiryInMilliseconds(): void
    {
        $n = uniq('sf-ms');
        $a = $this->factory()->createLock($n, 0.2, false);
        $this->assertTrue($a->acquire());
        $pttl = $this->redis->pttl("Lock:$n");
        $this->assertGreaterThan(100, $pttl);
        $this->assertLessThanOrEqual(200, $pttl, 'ttl 0.2 s is 200 ms in Redis, no floor');
        $this->assertLessThanOrEqual(0.2, $a->getRemainingLifetime());
        usleep(250000);
        $this->assertTrue($a->isExpired());
        $this->assertFalse($a->isAcquired());
        $b = $this->factory()->createLock($n, 0.05);
        $this->assertTrue($b->acquire(), 'free once 200 ms passed');
        $this->assertLessThanOrEqual(50, $this->redis->pttl("Lock:$n"));
        usleep(80000);
        $this->assertSame(0, $this->redis->exists("Lock:$n"), 'a 50 ms lock is gone after 80 ms');
    }

    public function testRefresh(): void
    {
        $n = uniq('sf-refresh');
        $lock = $this->factory()->createLock($n, 0.3);
        $this->assertTrue($lock->acquire());
        $lock->refresh(5);
        $this->assertGreaterThan(4000, $this->redis->pttl("Lock:$n"));
        $lock->refresh(0.15);
        $this->assertLessThanOrEqual(150, $this->redis->pttl("Lock:$n"));
        $lock->refresh();
        $this->assertLessThanOrEqual(300, $this->redis->pttl("Lock:$n"));
        usleep(350000);
        $thief = $this->factory()->createLock($n, 30);
        $this->assertTrue($thief->acquire());
        $this->expectException(LockConflictedException::class);
        $lock->refresh(); // it expired and someone else holds it
    }

    public function testSaveTwiceByTheSameKeyRefreshes(): void
    {
        $store = new FerrolockStore(redis_url(), 2.0);
        $n = uniq('sf-twice');
        $key = new Key($n);
        $store->save($key);
        $store->putOffExpiration($key, 0.5);
        $this->assertLessThanOrEqual(500, $this->redis->pttl("Lock:$n"));
        $store->save($key); // again, same key: still ours, ttl back to the initial 2 s
        $this->assertGreaterThan(1500, $this->redis->pttl("Lock:$n"));
        $this->assertTrue($store->exists($key));
        // A Symfony lock acquired twice (same key) stays acquired.
        $lock = $this->factory()->createLock(uniq('sf-twice-lock'), 30);
        $this->assertTrue($lock->acquire());
        $this->assertTrue($lock->acquire());
        $this->assertTrue($lock->isAcquired());
        $lock->release();
        $this->assertFalse($lock->isAcquired());
    }

    public function testBlockingAcrossProcesses(): void
    {
        $n = uniq('sf-block');
        [$proc, $out, $err] = spawn(['php', __DIR__ . '/workers/symfony_hold.php', $n, '0.5']);
        $this->expectLine("held", $out, $err);
        $lock = $this->factory()->createLock($n, 30);
        $t = microtime(true);
        $this->assertTrue($lock->acquire(true));
        $acquired = microtime(true);
        $line = fgets($out);
        $this->assertSame(0, proc_close($proc));
        $this->assertMatchesRegularExpression('/^released [0-9.]+$/', trim($line));
        $released = (float) explode(' ', trim($line))[1];
        $this->assertGreaterThan(0.3, $acquired - $t, 'it waited for the holder');
        // Woken by the release (Symfony's own stores poll every 100 ms or more).
        $this->assertLessThan(0.5, $acquired - $released, 'woken by the release');
        $lock->release();
    }

    public function testASymfonyWaiterIsWokenByAPythonRelease(): void
    {
        $python = getenv('FERROLOCK_PYTHON') ?: 'python3';
        $n = uniq('sf-python');
        $code = 'import sys, time; from ferrolock import Lock' . "\n"
            . 'l = Lock(sys.argv[1], url=sys.argv[2]); assert l.acquire(timeout=5)' . "\n"
            . 'print("held", flush=True); time.sleep(0.5); l.release(); print("released %.6f" % time.time(), flush=True)';
        [$proc, $out, $err] = spawn([$python, '-c', $code, $n, redis_url()]);
        $this->expectLine("held", $out, $err);
        $lock = $this->factory()->createLock($n, 30);
        $this->assertFalse($lock->acquire(), 'Python holds it');
        $this->assertTrue($lock->acquire(true));
        $acquired = microtime(true);
        $line = trim((string) fgets($out));
        $this->assertSame(0, proc_close($proc));
        $released = (float) explode(' ', $line)[1];
        $this->assertLessThan(0.5, $acquired - $released, 'woken by the Python release');
        $lock->release();
    }

    public function testASerializedKeyIsReleasedInAnotherProcess(): void
    {
        $n = uniq('sf-serialized');
        $key = new Key($n);
        $lock = $this->factory()->createLockFromKey($key, 30, false);
        $this->assertTrue($lock->acquire());
        [$proc, $out, $err] = spawn(['php', __DIR__ . '/workers/symfony_release_key.php', base64_encode(serialize($key))]);
        $this->assertSame("held\nreleased\n", stream_get_contents($out), stream_get_contents($err));
        $this->assertSame(0, proc_close($proc));
        $this->assertFalse($lock->isAcquired());
        $this->assertSame(0, $this->redis->exists("Lock:$n"));
    }

    public function testReadLocksFallBackToExclusiveLocks(): void
    {
        $n = uniq('sf-read');
        $a = $this->factory()->createLock($n, 30);
        $b = $this->factory()->createLock($n, 30);
        $this->assertTrue($a->acquireRead());
        $this->assertFalse($b->acquireRead(), 'no shared locks: exclusive');
        $a->release();
    }

    public function testFairAndPrefixOptions(): void
    {
        $n = uniq('sf-opts');
        $lock = $this->factory(['prefix' => 'App:', 'fair' => true])->createLock($n, 30);
        $this->assertTrue($lock->acquire());
        $this->assertSame(1, $this->redis->exists("App:$n"));
        $lock->release();
        // Legacy interop is a Ferrolock\Lock setting the store passes on: off,
        // the release is given no keys for legacy pollers' turns (4, not 6).
        foreach ([[[], 6], [['legacyInterop' => false], 4]] as [$options, $keys]) {
            $lock = $this->factory($options)->createLock($n, 30);
            $this->assertTrue($lock->acquire());
            $this->assertSame($keys, release_keys($this->redis, fn() => $lock->release()), json_encode($options));
        }
    }

    public function testBadInput(): void
    {
        foreach ([0.0, -1.0] as $ttl) {
            try {
                new FerrolockStore(redis_url(), $ttl);
                $this->fail("initialTtl $ttl accepted");
            } catch (InvalidTtlException) {
            }
        }
        try {
            new FerrolockStore(redis_url(), 300.0, ['tll' => 1]);
            $this->fail('unknown option accepted');
        } catch (InvalidArgumentException $e) {
            $this->assertStringContainsString('tll', $e->getMessage());
        }
        try {
            new FerrolockStore('http://not-redis');
            $this->fail('bad URL accepted');
        } catch (InvalidArgumentException) {
        }
        $store = new FerrolockStore(redis_url());
        try {
            $store->putOffExpiration(new Key(uniq('sf-bad')), 0.0);
            $this->fail('ttl 0 accepted');
        } catch (InvalidTtlException) {
        }
        try {
            $store->putOffExpiration(new Key(uniq('sf-bad')), 1.0);
            $this->fail('refresh of a lock never saved');
        } catch (LockConflictedException) {
        }
        $lock = $this->factory()->createLock(str_repeat('x', 5000), 30);
        try {
            $lock->acquire();
            $this->fail('a 5000-byte name accepted');
        } catch (LockAcquiringException $e) {
            $this->assertInstanceOf(InvalidArgumentException::class, $e->getPrevious());
        }
    }
}
