import pandas as pd
import numpy as np

df = pd.DataFrame({"a": np.arange(10), "b": np.random.rand(10)})
print(df.describe())
df.to_csv("/workspace/out.csv", index=False)
