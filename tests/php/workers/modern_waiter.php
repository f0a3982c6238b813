<?php
/** Waits for Ferrolock\Lock $argv[1] (up to 10 s); prints "acquired <unix time>". */
$l = new Ferrolock\Lock($argv[1], timeout: 10);
$got = $l->acquire();
printf("%s %.6f\n", $got ? 'acquired' : 'timeout', microtime(true));
if ($got) {
    $l->release();
}
exit($got ? 0 : 1);
