def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

while True:
    n = int(input() or 10)
    print(fib(n))
    break
