import * as api from '../lib';

test('the public exports are exactly these', () => {
  expect(Object.keys(api).sort()).toEqual([
    'CHANNELS',
    'LockLostError',
    'LockTimeoutError',
    'Mutex',
    'Semaphore',
    'SemaphoreClosedError',
    'SemaphoreError',
    'SemaphoreRedisError',
    'createDashboard',
  ]);
});

test('every error is a SemaphoreError with a literal name', () => {
  const errors = [
    new api.LockTimeoutError('s', 5),
    new api.SemaphoreRedisError('s', 'lock', new Error('x')),
    new api.SemaphoreClosedError('s'),
    new api.LockLostError('s', '0', 'expired'),
  ];
  expect(errors.map((error) => error.name)).toEqual([
    'LockTimeoutError',
    'SemaphoreRedisError',
    'SemaphoreClosedError',
    'LockLostError',
  ]);
  for (const error of errors) {
    expect(error).toBeInstanceOf(api.SemaphoreError);
    expect(error.semaphore).toBe('s');
  }
});
