<?php
/**
 * Dumps the shape of the ferrolock classes as JSON: from the loaded extension
 * (`php -d extension=… reflect.php`, with ferrolock.legacy_classes on or off)
 * or from the stubs (`php -n reflect.php path/to/ferrolock.stubs.php`).
 * tests/php/test_extension.py compares them.
 */
if ($argc > 1) {
    require $argv[1];
}
$out = [];
$classes = ['RedisLock', 'RedisQueue', 'RedisLockException',
    'Ferrolock\\FerrolockException', 'Ferrolock\\LockException', 'Ferrolock\\LockTimeoutException',
    'Ferrolock\\LockNotOwnedException', 'Ferrolock\\LockLostException', 'Ferrolock\\ConnectionException',
    'Ferrolock\\Lock', 'Ferrolock\\Queue', 'Ferrolock\\Task'];
foreach ($classes as $class) {
    // With ferrolock.legacy_classes off, the legacy classes are namespaced.
    $rc = new ReflectionClass(class_exists($class) ? $class : "Ferrolock\\$class");
    $declared = $rc->getName();
    $methods = [];
    foreach ($rc->getMethods() as $m) {
        if ($m->getDeclaringClass()->getName() !== $declared) {
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
    $interfaces = $rc->getInterfaceNames();
    sort($interfaces);
    $out[$class] = ['parent' => $rc->getParentClass() ? $rc->getParentClass()->getName() : null,
                    'interfaces' => $interfaces, 'methods' => $methods];
}
echo json_encode($out, JSON_PRETTY_PRINT), "\n";
