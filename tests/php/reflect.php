<?php
/**
 * Dumps the shape of the ferrolock classes as JSON: from the loaded extension
 * (`php -d extension=… reflect.php`) or from the stubs (`php -n reflect.php
 * path/to/ferrolock.stubs.php`). tests/php/test_extension.py compares the two.
 */
if ($argc > 1) {
    require $argv[1];
}
$out = [];
foreach (['RedisLock', 'RedisQueue', 'RedisLockException'] as $class) {
    $rc = new ReflectionClass($class);
    $methods = [];
    foreach ($rc->getMethods() as $m) {
        if ($m->getDeclaringClass()->getName() !== $class) {
            continue;
        }
        $params = [];
        foreach ($m->getParameters() as $p) {
            $params[] = [
                'name' => $p->getName(),
                'optional' => $p->isOptional(),
                'default' => $p->isDefaultValueAvailable() ? var_export($p->getDefaultValue(), true) : null,
            ];
        }
        $methods[$m->getName()] = ['static' => $m->isStatic(), 'params' => $params];
    }
    ksort($methods);
    $out[$class] = ['parent' => $rc->getParentClass() ? $rc->getParentClass()->getName() : null, 'methods' => $methods];
}
echo json_encode($out, JSON_PRETTY_PRINT), "\n";
