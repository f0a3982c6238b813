<?php

declare(strict_types=1);

use Ferrolock\Bridge\Laravel\FerrolockLock;
use Ferrolock\Bridge\Laravel\FerrolockLockProvider;
use Illuminate\Contracts\Cache\Lock as LockContract;
use Illuminate\Contracts\Cache\LockProvider;
use Illuminate\Contracts\Cache\LockTimeoutException;
use PHPUnit\Framework\TestCase;

/** FerrolockLock against the contract of Laravel's Illuminate\Cache\Lock. */
final class LaravelLockTest extends TestCase
{
    private Redis $redis;
    private FerrolockLockProvider $locks;

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
        $this->locks = new FerrolockLockProvider(redis_url());
    }

    public function testItImplementsLaravelsContracts(): void
    {
        $this->assertInstanceOf(LockProvider::class, $this->locks);
        $this->assertInstanceOf(LockContract::class, $this->locks->lock('x', 10));
        $this->assertInstanceOf(FerrolockLock::class, $this->locks->restoreLock('x', 'owner'));
    }

    public function testGetReleaseOwner(): void
    {
        $n = uniq('lv');
        $a = $this->locks->lock($n, 10);
        $b = $this->locks->lock($n, 10);
        $this->assertSame('', $a->owner(), 'no owner before the first acquire');
        $this->assertTrue($a->get());
        $this->assertNotSame('', $a->owner());
        $this->assertSame($a->owner(), $this->redis->get("Lock:$n"), 'the owner is the token in Lock:<name>');
        $this->assertTrue($a->isOwnedByCurrentProcess());
        $this->assertFalse($b->get());
        $this->assertFalse($b->isOwnedByCurrentProcess());
        $this->assertFalse($b->release(), 'release by a non-owner returns false');
        $this->assertSame(1, $this->redis->exists("Lock:$n"), 'and leaves the lock');
        $this->assertFalse($a->get(), 'not reentrant, as Laravel');
        $this->assertTrue($a->release());
        $this->assertFalse($a->release());
        $this->assertSame(0, $this->redis->exists("Lock:$n"));
        $this->assertFalse((new RedisLock())->isLocking($n));
    }

    public function testGetWithACallbackRunsItAndReleases(): void
    {
        $n = uniq('lv-callback');
        $this->assertSame('done', $this->locks->lock($n, 10)->get(function () use ($n) {
            $this->assertSame(1, $this->redis->exists("Lock:$n"));
            return 'done';
        }));
        $this->assertSame(0, $this->redis->exists("Lock:$n"), 'released after the callback');
        try {
            $this->locks->lock($n, 10)->get(function () {
                throw new RuntimeException('boom');
            });
            $this->fail('the exception was swallowed');
        } catch (RuntimeException) {
        }
        $this->assertSame(0, $this->redis->exists("Lock:$n"), 'released after a throwing callback');
        $holder = $this->locks->lock($n, 10);
        $this->assertTrue($holder->get());
        $called = false;
        $this->assertFalse($this->locks->lock($n, 10)->get(function () use (&$called) {
            $called = true;
        }));
        $this->assertFalse($called, 'not run without the lock');
        $holder->release();
    }

    public function testBlockWaitsAndTimesOut(): void
    {
        $n = uniq('lv-block');
        $holder = $this->locks->lock($n, 0.3);
        $this->assertTrue($holder->get());
        $t = microtime(true);
        $this->assertTrue($this->locks->lock($n, 10)->block(5), 'gets it when the 0.3 s lock expires');
        $waited = microtime(true) - $t;
        $this->assertGreaterThan(0.15, $waited);
        $this->assertLessThan(3, $waited);
        $t = microtime(true);
        try {
            $this->locks->lock($n, 10)->betweenBlockedAttemptsSleepFor(10)->block(0.3);
            $this->fail('block() did not time out');
        } catch (LockTimeoutException $e) {
            $this->assertStringContainsString($n, $e->getMessage());
        }
        $this->assertGreaterThan(0.25, microtime(true) - $t);
        $this->assertSame('ran', $this->locks->lock(uniq('lv-block2'), 10)->block(1, fn() => 'ran'));
    }

    public function testBlockIsWokenByTheRelease(): void
    {
        $n = uniq('lv-wake');
        $holder = $this->locks->lock($n, 30);
        $this->assertTrue($holder->get());
        [$proc, $out, $err] = spawn(['php', '-r', sprintf(
            'require %s; $t = microtime(true); $l = (new Ferrolock\Bridge\Laravel\FerrolockLockProvider(redis_url()))->lock(%s, 10); echo "waiting\n"; flush(); $l->block(10); printf("%%.6f\n", microtime(true)); $l->release();',
            var_export(__DIR__ . '/bootstrap.php', true),
            var_export($n, true)
        )]);
        $this->expectLine("waiting", $out, $err);
        usleep(300000);
        $released = microtime(true);
        $this->assertTrue($holder->release());
        $acquired = (float) fgets($out);
        $this->assertSame(0, proc_close($proc));
        $this->assertLessThan(0.2, $acquired - $released, 'woken by the release, not by a 250 ms poll');
    }

    public function testRestoreLockReleasesInThisAndAnotherProcess(): void
    {
        $n = uniq('lv-restore');
        $lock = $this->locks->lock($n, 30);
        $this->assertTrue($lock->get());
        $owner = $lock->owner();
        $this->assertFalse($this->locks->restoreLock($n, 'someone-else')->release());
        $restored = $this->locks->restoreLock($n, $owner);
        $this->assertSame($owner, $restored->owner());
        $this->assertTrue($restored->isOwnedByCurrentProcess());
        $this->assertTrue($restored->release(), 'restoreLock releases');
        $this->assertSame(0, $this->redis->exists("Lock:$n"));
        $this->assertFalse($lock->release(), 'the original no longer owns it');

        $this->assertTrue($lock->get());
        [$proc, $out, $err] = spawn(['php', __DIR__ . '/workers/laravel_release.php', $n, $lock->owner()]);
        $this->assertSame("true\n", stream_get_contents($out), stream_get_contents($err));
        $this->assertSame(0, proc_close($proc));
        $this->assertSame(0, $this->redis->exists("Lock:$n"), 'released by the job process');
        // lock($name, $seconds, $owner) is restoreLock with an owner.
        $this->assertFalse($this->locks->lock($n, 10, $owner)->release());
        $this->assertFalse($this->locks->restoreLock($n, '')->release());
    }

    public function testForceReleaseFreesAnyHold(): void
    {
        $n = uniq('lv-force');
        $holder = $this->locks->lock($n, 30);
        $this->assertTrue($holder->get());
        $this->locks->lock($n)->forceRelease();
        $this->assertSame(0, $this->redis->exists("Lock:$n"));
        $this->assertFalse($holder->release());
        $this->locks->lock($n)->forceRelease(); // a free lock: nothing to do
    }

    public function testSecondsZeroNeverExpiresAndSecondsExpire(): void
    {
        $n = uniq('lv-ttl');
        $forever = $this->locks->lock($n);
        $this->assertTrue($forever->get());
        $this->assertGreaterThan(365 * 24 * 3600, $this->redis->ttl("Lock:$n"), 'seconds 0: no expiry, as Laravel');
        $forever->release();
        $short = $this->locks->lock($n, 0.2);
        $this->assertTrue($short->get());
        $this->assertLessThanOrEqual(200, $this->redis->pttl("Lock:$n"));
        usleep(250000);
        $this->assertTrue($this->locks->lock($n, 1)->get(), 'expired after its seconds');
        $this->assertFalse($short->release());
    }

    public function testBadInput(): void
    {
        $this->expectException(ValueError::class);
        $this->locks->lock(uniq('lv-bad'), -1);
    }

    public function testBadNamesAndConnections(): void
    {
        foreach ([fn() => $this->locks->lock('', 10)->get(), fn() => new FerrolockLockProvider('http://x'),
                  fn() => new FerrolockLockProvider(redis_url(), ['tll' => 1]), fn() => $this->locks->lock('x', NAN)] as $call) {
            try {
                $call();
                $this->fail('accepted');
            } catch (ValueError) {
                $this->addToAssertionCount(1);
            }
        }
    }
}
