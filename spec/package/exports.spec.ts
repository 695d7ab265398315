import * as api from '../../lib';

test('the public exports are exactly these', () => {
  expect(Object.keys(api).sort()).toEqual([
    'CHANNELS',
    'LockLostError',
    'LockTimeoutError',
    'Locks',
    'Mutex',
    'ReplicationError',
    'Semaphore',
    'SemaphoreClosedError',
    'SemaphoreError',
    'SemaphoreRedisError',
    'TRACING_CHANNELS',
    'UnsupportedServerError',
    'createDashboard',
    'createLocks',
  ]);
});

test('every error is a SemaphoreError with a literal name', () => {
  const errors = [
    new api.LockTimeoutError('s', 5),
    new api.SemaphoreRedisError('s', 'lock', new Error('x')),
    new api.SemaphoreClosedError('s'),
    new api.LockLostError('s', '0', 'expired'),
    new api.ReplicationError('s', 'lock', 1, 0),
    new api.UnsupportedServerError('s', '6.0.16', '6.2.0'),
  ];
  expect(errors.map((error) => error.name)).toEqual([
    'LockTimeoutError',
    'SemaphoreRedisError',
    'SemaphoreClosedError',
    'LockLostError',
    'ReplicationError',
    'UnsupportedServerError',
  ]);
  for (const error of errors) {
    expect(error).toBeInstanceOf(api.SemaphoreError);
    expect(error.semaphore).toBe('s');
  }
});
